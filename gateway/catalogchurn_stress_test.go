package gateway

import (
	"bytes"
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
)

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

	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "rl", "url": rc.url("rl", 0), "rate_limit": rlRate, "max_in_flight": 4, "event_types": []string{"a.*"}}))
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "mf", "url": rc.url("mf", 0), "max_in_flight": mfMax}))
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "churn", "url": rc.url("churn", 0), "event_types": []string{"a.*"}}))

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
			var l apiList[deliveryView]
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
	settled := func() []deliveryView {
		var live []deliveryView
		for _, st := range []string{"pending", "delivering"} {
			l := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?limit=100&status="+st, acmeToken, nil))
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
