package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// slowClaimStore is the real store whose next Claim of an endpoint, once
// armed, is written and then held before it returns to the endpoint's
// loop, until the test opens the gate: a claim whose commit waits behind
// a batch and its fsync (milliseconds under load). The loop has planned
// the claim with the endpoint's settings of that moment.
type slowClaimStore struct {
	storage.Store
	armed   atomic.Pointer[string] // endpoint id whose next non-empty claim is held
	entered chan []storage.Job     // the held claim's jobs
	gate    chan struct{}
}

func newSlowClaimStore() *slowClaimStore {
	return &slowClaimStore{entered: make(chan []storage.Job, 1), gate: make(chan struct{})}
}

func (s *slowClaimStore) arm(endpoint string) { s.armed.Store(&endpoint) }

func (s *slowClaimStore) Claim(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration) ([]storage.Job, error) {
	jobs, err := s.Store.Claim(ctx, endpoint, now, limit, lease)
	if a := s.armed.Load(); err == nil && len(jobs) > 0 && a != nil && *a == endpoint && s.armed.CompareAndSwap(a, nil) {
		s.entered <- jobs
		<-s.gate // like a queued Badger write: it returns whatever ctx does
	}
	return jobs, err
}

// churnSetup starts a gateway on a slowClaimStore with endpoint "ep"
// (acme) posting to rc's /old, delivers one event to it (handed off, not
// claimed), then replays that event with the store armed: the loop's
// claim of the replayed delivery is written and held. It returns the
// delivery being claimed.
func churnSetup(t *testing.T, rc *receiver) (*gw, *slowClaimStore, string) {
	t.Helper()
	ss := newSlowClaimStore()
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { ss.Store = s; return ss }})
	t.Cleanup(func() {
		select {
		case <-ss.gate:
		default:
			close(ss.gate)
		}
	})
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "ep", "url": rc.url("old")}))
	st, _, b := g.post("open", []byte(`{"id":"churn-1","type":"invoice.paid"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "the first delivery to succeed", func() bool {
		ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+evt, acmeToken, nil)).Data
		return len(ds) == 1 && ds[0].State == "succeeded" && rc.count() == 1
	})
	ss.arm("ep")
	replayed := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", "/events/"+evt+"/replay", acmeToken, jsonMap{})).Data
	if len(replayed) != 1 {
		t.Fatalf("replay made %d deliveries, want 1", len(replayed))
	}
	select {
	case jobs := <-ss.entered:
		if len(jobs) != 1 || jobs[0].Delivery.ID != replayed[0].ID {
			t.Fatalf("held claim took %d jobs, want the replayed delivery %s", len(jobs), replayed[0].ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the endpoint's loop never claimed the replayed delivery")
	}
	return g, ss, replayed[0].ID
}

// An endpoint disabled with PATCH {"disabled":true} while its loop's claim
// is being written got the claimed deliveries all the same, after the
// PATCH had answered 200: the loop sent with the settings it planned the
// claim with. (The hand-off re-checks them now,
// TestHandDoesNotSendToADisabledEndpoint; the loop's claims now do too.)
func TestClaimedDeliveryIsNotSentToAnEndpointDisabledDuringTheClaim(t *testing.T) {
	rc := newReceiver(t)
	g, ss, dlv := churnSetup(t, rc)

	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/ep", acmeToken, jsonMap{"disabled": true}))
	close(ss.gate)
	testsupport.WaitFor(t, 10*time.Second, "the claimed delivery to be sent or put back", func() bool {
		d := must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+dlv, acmeToken, nil))
		return rc.count() > 1 || d.State == "pending"
	})
	if n := rc.count(); n > 1 {
		t.Fatalf("the endpoint got %d request(s) after PATCH disabled:true answered 200", n-1)
	}
}

// An endpoint moved to a new URL and given a new secret (PATCH url and
// secret, both "at once" in the API) while its loop's claim is being
// written: the claimed delivery, whose attempt starts after the PATCH
// answered 200, went to the old URL, signed only with the replaced secret.
func TestClaimedDeliveryGoesToTheURLAndSecretOfAPatchMadeDuringTheClaim(t *testing.T) {
	rc := newReceiver(t)
	g, ss, _ := churnSetup(t, rc)

	const newSecret = "whsec_dGhpcyBpcyB0aGUgbmV3IHNlY3JldCBrZXkh"
	ep := must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/ep", acmeToken, jsonMap{"url": rc.url("new"), "secret": newSecret}))
	if ep.URL != rc.url("new") || ep.Secret != newSecret {
		t.Fatalf("PATCH answered %+v", ep)
	}
	close(ss.gate)
	testsupport.WaitFor(t, 10*time.Second, "the replayed delivery to arrive", func() bool { return rc.count() == 2 })
	r := rc.all()[1]
	if r.path != "/new" {
		t.Errorf("the attempt started after PATCH url answered 200 went to %s, the old URL", r.path)
	}
	if !swVerify(newSecret, r.header.Get("webhook-id"), r.header.Get("webhook-timestamp"), r.body, r.header.Get("webhook-signature")) {
		t.Errorf("the attempt started after PATCH secret answered 200 is not signed with the new secret (the old one was replaced at once)")
	}
}

// DELETE /endpoints/{id} answers 204 while its loop's claim is being
// written; the claimed delivery was then sent to the deleted endpoint.
func TestClaimedDeliveryIsNotSentAfterItsEndpointWasDeleted(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	g, ss, dlv := churnSetup(t, rc)

	if st, _, b := g.api("DELETE", "/endpoints/ep", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	close(ss.gate)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && rc.count() == 1 {
		time.Sleep(10 * time.Millisecond) // polling for a request that must not come
	}
	if n := rc.count(); n > 1 {
		d := must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+dlv, acmeToken, nil))
		t.Fatalf("the deleted endpoint got %d request(s) after DELETE answered 204 (delivery %s)", n-1, d.State)
	}
}

// An endpoint deleted and created again with the same id by the same
// tenant is a new endpoint (the dispatcher's 410 and the bulk replay tell
// them apart by created_at): its own URL, secret and event_types. A
// manual retry of a delivery made for the old one (succeeded or failed,
// so the delete's backlog cancel left it) was accepted and sent to the new
// endpoint, whatever it subscribes to: here an invoice event to an
// endpoint that takes only customer events. It is refused, as a retry of
// the same delivery after another tenant took the id is (409
// endpoint-deleted).
func TestRetryOfADeletedEndpointsDeliveryDoesNotGoToItsSuccessor(t *testing.T) {
	rc := newReceiver(t)
	g := startGateway(t, gwOptions{})
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "billing", "url": rc.url("first"), "event_types": []string{"invoice.*"}}))
	st, _, b := g.post("open", []byte(`{"id":"inv-1","type":"invoice.paid"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	var dlv string
	testsupport.WaitFor(t, 10*time.Second, "the delivery to the first endpoint", func() bool {
		ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+evt, acmeToken, nil)).Data
		if len(ds) == 1 && ds[0].State == "succeeded" {
			dlv = ds[0].ID
			return true
		}
		return false
	})
	if st, _, b := g.api("DELETE", "/endpoints/billing", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "billing", "url": rc.url("second"), "event_types": []string{"customer.*"}}))

	st, _, b = g.api("POST", "/deliveries/"+dlv+"/retry", acmeToken, nil)
	if st == 202 {
		testsupport.WaitFor(t, 10*time.Second, "the retried delivery", func() bool { return rc.count() == 2 })
		t.Fatalf("retry of the deleted endpoint's delivery answered 202 and sent invoice.paid to %s, the new endpoint with event_types [customer.*]", rc.all()[1].path)
	}
	if st != 409 {
		t.Fatalf("retry: %d %s", st, b)
	}
}

// churnReceiver records every request with when it arrived and ended,
// and how many requests of each endpoint (the path's first segment) it
// held at once. It answers 200 after hold (in nanoseconds; 0 once the load
// ends, so that the backlog drains at the gateway's pace).
type churnReceiver struct {
	srv    *httptest.Server
	hold   atomic.Int64
	mu     sync.Mutex
	reqs   []churnReq
	active map[string]int
	peak   map[string]int
}

type churnReq struct {
	ep, ver string
	typ     string
	at      time.Time
}

func newChurnReceiver(t *testing.T, hold time.Duration) *churnReceiver {
	r := &churnReceiver{active: map[string]int{}, peak: map[string]int{}}
	r.hold.Store(int64(hold))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.ReadAll(req.Body)
		ep, ver, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/")
		r.mu.Lock()
		r.reqs = append(r.reqs, churnReq{ep: ep, ver: ver, typ: req.Header.Get("hookgate-event-type"), at: time.Now()})
		r.active[ep]++
		r.peak[ep] = max(r.peak[ep], r.active[ep])
		r.mu.Unlock()
		if hold := time.Duration(r.hold.Load()); hold > 0 {
			t := time.NewTimer(hold)
			select {
			case <-t.C:
			case <-req.Context().Done():
			}
			t.Stop()
		}
		r.mu.Lock()
		r.active[ep]--
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *churnReceiver) url(ep string, ver int) string {
	return fmt.Sprintf("%s/%s/%d", r.srv.URL, ep, ver)
}

func (r *churnReceiver) snapshot() ([]churnReq, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs), maps.Clone(r.peak)
}

// churnClient calls the gateway from any goroutine; a call that does not
// answer within its timeout is a wedge.
type churnClient struct {
	g      *gw
	client *http.Client
	mu     sync.Mutex
	errs   []string
}

func (c *churnClient) errorf(format string, a ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) < 20 {
		c.errs = append(c.errs, fmt.Sprintf(format, a...))
	}
}

func (c *churnClient) do(method, url, token string, body any) (int, []byte) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, _ := json.Marshal(b)
		rd = bytes.NewReader(enc)
	}
	req, _ := http.NewRequest(method, url, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		c.errorf("%s %s: %v (wedged?)", method, url, err)
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 500 {
		c.errorf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode, b
}

func (c *churnClient) api(method, path string, body any) (int, []byte) {
	return c.do(method, "http://"+c.g.AdminAddr()+"/api/v1"+path, acmeToken, body)
}

// endpointLoops counts the dispatcher's endpoint loop goroutines.
func endpointLoops() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "outbound.(*endpointLoop).run(")
}

// Ingest, single and bulk replays and manual retries at load while the
// catalog churns through the admin API: a rate-limited endpoint moved and
// its secret rotated, a max_in_flight endpoint moved and its timeout
// changed, and an endpoint deleted and created again with the same id
// and alternating event_types. What must hold throughout: every request
// answers (no wedge), max_in_flight and rate_limit are never exceeded, a
// generation of the churned endpoint gets only the event types it
// subscribes to, and afterwards every delivery to the endpoints left
// settles without waiting for anything (no lost wake-up) and there is
// one loop per endpoint (no leaked loop).
func TestCatalogChurnUnderLoad(t *testing.T) {
	dur := 4 * time.Second
	if v := os.Getenv("HOOKGATE_CHURN_DURATION"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			dur = d
		}
	}
	const rlRate, rlBurst, mfMax = 50, 5, 2
	rc := newChurnReceiver(t, 3*time.Millisecond)
	g := startGateway(t, gwOptions{})
	c := &churnClient{g: g, client: &http.Client{Timeout: 20 * time.Second}}

	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "rl", "url": rc.url("rl", 0), "rate_limit": rlRate, "max_in_flight": 4, "event_types": []string{"a.*"}}))
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "mf", "url": rc.url("mf", 0), "max_in_flight": mfMax}))
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "churn", "url": rc.url("churn", 0), "event_types": []string{"a.*"}}))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var events sync.Map // index -> gateway event id
	var nEvents atomic.Int64
	// Ingest: a.* and b.* events.
	untilStopped(&wg, stop, 3, func(w, i int) bool {
		typ := "b.x"
		if i%10 == 0 {
			typ = "a.x"
		}
		body := fmt.Appendf(nil, `{"id":"w%d-%d","type":%q}`, w, i, typ)
		st, b := c.do("POST", "http://"+g.PublicAddr()+"/ingest/open", "", body)
		if st != 202 {
			if st != 0 {
				c.errorf("ingest: %d %s", st, b)
			}
			return true
		}
		var v jsonMap
		if json.Unmarshal(b, &v) == nil {
			events.Store(nEvents.Add(1)-1, v["id"].(string))
		}
		return true
	})
	randomEvent := func(rng *rand.Rand) (string, bool) {
		n := nEvents.Load()
		if n == 0 {
			return "", false
		}
		v, ok := events.Load(rng.Int64N(n))
		if !ok {
			return "", false
		}
		return v.(string), true
	}
	// Replays and retries.
	rng := rand.New(rand.NewPCG(1, 2))
	untilStopped(&wg, stop, 1, func(_, i int) bool {
		evt, ok := randomEvent(rng)
		if !ok {
			return true
		}
		switch i % 10 {
		case 0:
			c.api("POST", "/replays", jsonMap{"source": "open", "since": time.Now().Add(-300 * time.Millisecond).UTC().Format(time.RFC3339Nano)})
		case 1, 2, 3:
			c.api("POST", "/events/"+evt+"/replay", jsonMap{})
		default:
			st, b := c.api("GET", "/deliveries?event="+evt, nil)
			if st != 200 {
				return true
			}
			var l admin.List[admin.Delivery]
			if json.Unmarshal(b, &l) != nil || len(l.Data) == 0 {
				return true
			}
			d := l.Data[rng.IntN(len(l.Data))]
			c.api("POST", "/deliveries/"+d.ID+"/retry", nil)
		}
		return true
	})
	// Catalog churn.
	var churnGen atomic.Int64 // generation of "churn" now
	untilStopped(&wg, stop, 1, func(_, i int) bool {
		i++ // generations from 1
		c.api("PATCH", "/endpoints/rl", jsonMap{"url": rc.url("rl", i)})
		c.api("POST", "/endpoints/rl/rotate-secret", jsonMap{"grace": "1h"})
		c.api("PATCH", "/endpoints/mf", jsonMap{"url": rc.url("mf", i), "timeout": fmt.Sprintf("%ds", 1+i%3)})
		if st, b := c.api("DELETE", "/endpoints/churn", nil); st != 204 {
			c.errorf("delete churn: %d %s", st, b)
			return true
		}
		types := []string{"a.*"}
		if i%2 == 1 {
			types = []string{"b.*"}
		}
		for {
			st, b := c.api("POST", "/endpoints", jsonMap{"id": "churn", "url": rc.url("churn", i), "event_types": types})
			if st == 201 {
				churnGen.Store(int64(i))
				break
			}
			if st != 409 {
				c.errorf("create churn: %d %s", st, b)
				return false
			}
			select {
			case <-stop:
				return false
			case <-time.After(20 * time.Millisecond): // the backlog cancel's pace, not a synchronisation
			}
		}
		return true
	})

	time.Sleep(dur) // the length of the load, not a synchronisation
	close(stop)
	rc.hold.Store(0)
	waitDone := make(chan struct{})
	go func() { wg.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case <-time.After(60 * time.Second):
		t.Fatal("load goroutines did not finish: something is wedged")
	}
	for _, e := range c.errs {
		t.Error(e)
	}

	// Settle: every delivery to the endpoints left is delivered.
	settled := func() []admin.Delivery {
		var live []admin.Delivery
		for _, st := range []string{"pending", "delivering"} {
			l := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?limit=100&status="+st, acmeToken, nil))
			live = append(live, l.Data...)
		}
		return live
	}
	// A wedge (a lost wake-up, a leaked slot) shows as live deliveries and
	// a receiver that gets nothing; a slow machine only as a long drain:
	// mf (max_in_flight 2) has every event and replay to deliver. So the
	// test fails when 15 s pass without a request while deliveries are
	// live, and gives the whole drain 5 minutes.
	const stallLimit, drainLimit = 15 * time.Second, 5 * time.Minute
	drainEnd := time.Now().Add(drainLimit)
	lastCount, lastProgress := -1, time.Now()
	for live := settled(); len(live) > 0; live = settled() {
		reqs, _ := rc.snapshot()
		if len(reqs) != lastCount {
			lastCount, lastProgress = len(reqs), time.Now()
		}
		if stalled := time.Since(lastProgress) > stallLimit; stalled || time.Now().After(drainEnd) {
			byEP := map[string]int{}
			for _, d := range live {
				byEP[d.Endpoint+"/"+d.State]++
			}
			why := fmt.Sprintf("%s after the load", drainLimit)
			if stalled {
				why = fmt.Sprintf("no request reached the receiver for %s", stallLimit)
			}
			t.Fatalf("%s, and %d+ deliveries are still live: %v; e.g. %+v", why, len(live), byEP, live[0])
		}
		time.Sleep(50 * time.Millisecond) // polling step
	}
	reqs, peak := rc.snapshot()
	t.Logf("%d events, %d requests (%d churn generations); peaks %v", nEvents.Load(), len(reqs), churnGen.Load(), peak)

	if peak["mf"] > mfMax {
		t.Errorf("max_in_flight %d, but mf's receiver held %d requests at once", mfMax, peak["mf"])
	}
	var rl []time.Time
	for _, r := range reqs {
		switch r.ep {
		case "rl":
			rl = append(rl, r.at)
		case "churn":
			var gen int
			fmt.Sscan(r.ver, &gen)
			want := "a."
			if gen%2 == 1 {
				want = "b."
			}
			if !strings.HasPrefix(r.typ, want) {
				t.Errorf("churn generation %d (event_types [%s*]) got an event of type %s", gen, want, r.typ)
			}
		}
	}
	slices.SortFunc(rl, func(a, b time.Time) int { return a.Compare(b) })
	worst := 0
	for i, j := 0, 0; j < len(rl); j++ {
		for rl[j].Sub(rl[i]) >= time.Second {
			i++
		}
		worst = max(worst, j-i+1)
	}
	// A token bucket of rate r and burst b sends at most b + r*W in any
	// window W; requests sent within 1.1s may arrive within one (100ms
	// for the way to the receiver under -race).
	t.Logf("rl: at most %d requests within one second", worst)
	if limit := rlBurst + rlRate*11/10; worst > limit {
		t.Errorf("rate_limit %d/s (burst %d): %d requests arrived within one second (at most %d expected)", rlRate, rlBurst, worst, limit)
	}
	if n := endpointLoops(); n != 3 {
		t.Errorf("%d endpoint loops running for 3 endpoints", n)
	}
}

// Creating an endpoint, delivering to it and deleting it, over and over,
// leaves no goroutine behind: its loop, its attempts and its backlog
// cancel all end: what a long-running gateway whose tenants churn
// endpoints relies on. The /metrics side
// of the same churn is TestMetricsStayForgottenWhenTheLastOutcomeIsCountedAfterTheDelete.
func TestEndpointChurnLeavesNoGoroutine(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{})
	round := func(i int) {
		id := fmt.Sprintf("churn-%d", i)
		must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": id, "url": rcv.url(id)}))
		st, _, b := g.post("open", fmt.Appendf(nil, `{"id":"e-%d"}`, i), nil)
		if st != 202 {
			t.Fatalf("ingest %d: %s", st, b)
		}
		testsupport.WaitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() >= i+1 })
		if st, _, b := g.api("DELETE", "/endpoints/"+id, acmeToken, nil); st != 204 {
			t.Fatalf("delete %d: %s", st, b)
		}
	}
	// One round first, so that what starts lazily (pools, connections)
	// is in the baseline.
	round(0)
	base := runtime.NumGoroutine()
	const rounds = 200
	for i := 1; i <= rounds; i++ {
		round(i)
	}
	testsupport.WaitFor(t, 10*time.Second, fmt.Sprintf("goroutines back to the baseline (%d) after %d endpoints", base, rounds), func() bool {
		return runtime.NumGoroutine() <= base+5
	})
}
