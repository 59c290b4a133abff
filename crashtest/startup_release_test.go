package crashtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pathReceiver counts requests per path and Idempotency-Key. While held,
// it keeps every request open until released (or the client goes away);
// with fail set it answers 500.
type pathReceiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	byPath   map[string]map[string]int
	held     atomic.Bool
	fail     atomic.Bool
	inFlight atomic.Int64
	release  chan struct{}
	once     sync.Once
}

func newPathReceiver(t *testing.T) *pathReceiver {
	t.Helper()
	r := &pathReceiver{byPath: map[string]map[string]int{}, release: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		if r.held.Load() {
			r.inFlight.Add(1)
			select {
			case <-r.release:
			case <-req.Context().Done():
				r.inFlight.Add(-1)
				return
			}
			r.inFlight.Add(-1)
		}
		if r.fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		r.mu.Lock()
		m := r.byPath[req.URL.Path]
		if m == nil {
			m = map[string]int{}
			r.byPath[req.URL.Path] = m
		}
		m[req.Header.Get("Idempotency-Key")]++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	t.Cleanup(r.free)
	return r
}

func (r *pathReceiver) free() { r.once.Do(func() { close(r.release) }) }

func (r *pathReceiver) keys(path string) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, n := range r.byPath[path] {
		out[k] = n
	}
	return out
}

// cfgEndpoint is one endpoint of writeEndpointsConfig's config.yaml.
type cfgEndpoint struct {
	id, url, timeout, retry string
	maxInFlight             int
}

// writeEndpointsConfig writes the supervisor's config.yaml with the test's
// source and the given endpoints and top-level settings.
func writeEndpointsConfig(t *testing.T, s *supervisor, retention, retry string, eps []cfgEndpoint) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "server: {listen: %q}\nadmin:\n  listen: %q\n  tokens:\n    - {token: %q, tenant: \"\"}\n",
		strings.TrimPrefix(s.ingestURL, "http://"), strings.TrimPrefix(s.adminURL, "http://"), operatorToken)
	fmt.Fprintf(&b, "storage: {driver: badger, path: %q}\n", s.dataDir)
	if retention != "" {
		fmt.Fprintf(&b, "retention: %s\n", retention)
	}
	fmt.Fprintf(&b, "delivery:\n  timeout: 5s\n  allow_private_targets: true\n  retry: %s\n", retry)
	fmt.Fprintf(&b, "sources:\n  - id: %s\n    tenant: %s\n    verify: {scheme: standard-webhooks, secrets: [%q]}\n", sourceID, tenantID, sourceSecret)
	b.WriteString("endpoints:\n")
	for _, ep := range eps {
		fmt.Fprintf(&b, "  - id: %s\n    tenant: %s\n    url: %q\n    secret: %q\n    max_in_flight: %d\n", ep.id, tenantID, ep.url, endpointSecret, ep.maxInFlight)
		if ep.timeout != "" {
			fmt.Fprintf(&b, "    timeout: %s\n", ep.timeout)
		}
		if ep.retry != "" {
			fmt.Fprintf(&b, "    retry: %s\n", ep.retry)
		}
	}
	if err := os.WriteFile(s.config, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// deliveryStates counts every delivery by state through the admin API
// (all pages).
func deliveryStates(sup *supervisor) (map[string]int, error) {
	out := map[string]int{}
	for cursor := ""; ; {
		u := sup.adminURL + "/api/v1/deliveries?limit=1000"
		if cursor != "" {
			u += "&cursor=" + cursor
		}
		st, b, _, err := adminCall(sup.client, http.MethodGet, u, nil, nil)
		if err != nil {
			return nil, err
		}
		if st != http.StatusOK {
			return nil, fmt.Errorf("GET /deliveries: %d %s", st, excerpt(b, 200))
		}
		var page struct {
			Data []struct {
				State string `json:"state"`
			} `json:"data"`
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, err
		}
		for _, d := range page.Data {
			out[d.State]++
		}
		if page.NextCursor == "" {
			return out, nil
		}
		cursor = page.NextCursor
	}
}

// Many deliveries in flight to a receiver that holds them (ten endpoints,
// 100 slots each, a 30s timeout, so a lease of more than 30s) when the
// process is SIGKILLed; then several restarts are themselves SIGKILLed
// during startup, at delays that land before, in and after the store's
// release of the dead process's claims. The last start must resume every
// claimed delivery at once (not after the dead leases), every event reaches
// every endpoint, and each event has exactly one delivery per endpoint.
func TestKillDuringStartupClaimRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const (
		nEndpoints = 10
		nEvents    = 600
	)
	rc := newPathReceiver(t)
	rc.held.Store(true)
	sup := newSupervisor(t, buildBinary(t), rc.srv.URL)
	var eps []cfgEndpoint
	for i := range nEndpoints {
		eps = append(eps, cfgEndpoint{id: fmt.Sprintf("ep%d", i), url: fmt.Sprintf("%s/ep%d", rc.srv.URL, i), timeout: "30s", maxInFlight: 100})
	}
	writeEndpointsConfig(t, sup, "", "{initial_interval: 50ms, max_interval: 500ms, max_attempts: 1000, max_elapsed: 1h}", eps)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	publishEvents(t, sup, "rel-", nEvents)
	waitUntil(t, 30*time.Second, "the receiver to hold most slots", func() bool { return rc.inFlight.Load() >= nEndpoints*100*9/10 })
	t.Logf("%d attempts held at the receiver at the kill", rc.inFlight.Load())
	if err := sup.kill(); err != nil {
		t.Fatal(err)
	}
	rc.held.Store(false)
	rc.free()
	for _, d := range []time.Duration{40, 80, 120, 160, 200, 260, 330, 450} {
		if err := sup.killDuringStartup(d * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	// Well under the dead claims' lease (30s timeout + margin).
	deadline := time.Now().Add(20 * time.Second)
	var states map[string]int
	for {
		var err error
		states, err = deliveryStates(sup)
		if err == nil && states["pending"] == 0 && states["delivering"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after the last start, deliveries by state: %v (err %v): claims of a killed process were not released at start",
				time.Since(began).Round(time.Millisecond), states, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("drained %v after the last start: %v", time.Since(began).Round(time.Millisecond), states)
	for i := range nEndpoints {
		if got := rc.keys(fmt.Sprintf("/ep%d", i)); len(got) != nEvents {
			t.Errorf("endpoint ep%d received %d distinct events, want %d", i, len(got), nEvents)
		}
	}
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
	for id, ds := range storedDeliveries(t, sup.dataDir) {
		per := map[string]int{}
		for _, d := range ds {
			per[d.Endpoint]++
		}
		for i := range nEndpoints {
			if n := per[fmt.Sprintf("ep%d", i)]; n != 1 {
				t.Errorf("event %s has %d deliveries to ep%d, want 1", id, n, i)
			}
		}
	}
	for _, p := range sup.logProblems() {
		t.Errorf("gateway crashed: %s", p)
	}
}
