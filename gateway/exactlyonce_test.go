package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// chaosReq is one request a chaos receiver got, and how it answered.
type chaosReq struct {
	ep, ver   string // /<ep>/<ver>
	key, wid  string
	ts        string
	sig       string
	attempt   string
	source    string
	typ       string
	ctype     string
	body      []byte
	at        time.Time
	answer    int // status written; 0 for a reset or a timeout
	outcome   string
	processed bool // the first 2xx of its (endpoint, key): the receiver acted on it
}

// chaosReceiver is a subscriber behind flaky infrastructure that dedupes
// on Idempotency-Key per endpoint: it answers 500, 429 with Retry-After,
// times out or resets the connection at random (seeded), never more than
// maxRun times in a row per endpoint (so the circuit, 5 failures, stays
// closed and the test stays short), and processes an (endpoint, key) on
// its first 2xx only.
type chaosReceiver struct {
	srv       *httptest.Server
	mu        sync.Mutex
	rng       *rand.Rand
	run       map[string]int // consecutive failures per endpoint
	reqs      []chaosReq
	processed map[string]int  // ep|key -> requests that got a 2xx
	calm      atomic.Bool     // no more chaos: drain
	gone      map[string]bool // ep -> every request to it gets 410 while set
}

const chaosMaxRun = 2

func newChaosReceiver(t *testing.T, seed uint64) *chaosReceiver {
	r := &chaosReceiver{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), run: map[string]int{}, processed: map[string]int{}, gone: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *chaosReceiver) url(ep, ver string) string { return r.srv.URL + "/" + ep + "/" + ver }

func (r *chaosReceiver) serve(w http.ResponseWriter, req *http.Request) {
	at := time.Now()
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	parts := strings.SplitN(strings.Trim(req.URL.Path, "/"), "/", 2)
	q := chaosReq{
		ep: parts[0], key: req.Header.Get("Idempotency-Key"), wid: req.Header.Get("webhook-id"),
		ts: req.Header.Get("webhook-timestamp"), sig: req.Header.Get("webhook-signature"),
		attempt: req.Header.Get("hookgate-attempt"), source: req.Header.Get("hookgate-source"),
		typ: req.Header.Get("hookgate-event-type"), ctype: req.Header.Get("Content-Type"), body: body, at: at,
	}
	if len(parts) == 2 {
		q.ver = parts[1]
	}
	r.mu.Lock()
	outcome := "ok"
	if r.gone[q.ep] {
		outcome = "410"
	} else if !r.calm.Load() && r.run[q.ep] < chaosMaxRun {
		switch p := r.rng.Float64(); {
		case p < 0.12:
			outcome = "500"
		case p < 0.20:
			outcome = "429"
		case p < 0.26:
			outcome = "timeout"
		case p < 0.32:
			outcome = "reset"
		}
	}
	if outcome == "ok" {
		r.run[q.ep] = 0
		k := q.ep + "|" + q.key
		r.processed[k]++
		q.processed = r.processed[k] == 1
		q.answer = 200
	} else {
		r.run[q.ep]++
	}
	q.outcome = outcome
	switch outcome {
	case "500":
		q.answer = 500
	case "429":
		q.answer = 429
	case "410":
		q.answer = 410
	}
	r.reqs = append(r.reqs, q)
	r.mu.Unlock()

	switch outcome {
	case "ok":
		w.WriteHeader(200)
	case "500":
		w.WriteHeader(500)
		_, _ = io.WriteString(w, "flaky")
	case "429":
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(429)
	case "410":
		w.WriteHeader(410)
	case "timeout":
		select {
		case <-req.Context().Done():
		case <-time.After(3 * time.Second):
		}
		// Answer nothing useful: the gateway gave up on it.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
			}
		}
	case "reset":
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
				_ = c.Close()
			}
		}
	}
}

func (r *chaosReceiver) snapshot() []chaosReq {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

func (r *chaosReceiver) isProcessed(ep, key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.processed[ep+"|"+key] > 0
}

// scenEvent is one logical event a provider sent.
type scenEvent struct {
	source, eid, typ string
	body             []byte
	firstSend        time.Time
	firstOK          time.Time
	answers          []string // every 2xx body
	replayedFlags    []bool
	gwID             string
	wrongBodyStatus  int // status of a resend with another body (0: none sent)
}

// scenario holds what a test with restarts and concurrent admin calls
// shares between goroutines.
type scenario struct {
	t      *testing.T
	cur    atomic.Pointer[gw]
	client *http.Client
	mu     sync.Mutex
	errs   []string
}

func (s *scenario) errorf(format string, a ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf(format, a...))
}

// ingest posts once to the current gateway; err for a transport error.
func (s *scenario) ingest(source string, body []byte, hdr map[string]string) (int, http.Header, []byte, error) {
	g := s.cur.Load()
	req, _ := http.NewRequest("POST", "http://"+g.PublicAddr()+"/ingest/"+source, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// admin calls the admin API of the current gateway, without failing.
func (s *scenario) admin(method, p, token string, body any) (int, []byte, error) {
	g := s.cur.Load()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+g.AdminAddr()+"/api/v1"+p, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// swVerify reports whether one of the v1 signatures of sig verifies with
// secret, computed with crypto/hmac.
func swVerify(secret, id, ts string, body []byte, sig string) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
	want := mac.Sum(nil)
	for _, f := range strings.Fields(sig) {
		v, ok := strings.CutPrefix(f, "v1,")
		if !ok {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(v)
		if err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}

// TestExactlyOnceUnderProductionChaos combines what happens in production
// and checks what a subscriber that dedupes on Idempotency-Key relies on.
func TestExactlyOnceUnderProductionChaos(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(strings.TrimSpace(envOr("HOOKGATE_CHAOS_SEED", "")), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (rerun with HOOKGATE_CHAOS_SEED=%d)", seed, seed)
	rcv := newChaosReceiver(t, seed)
	rng := rand.New(rand.NewPCG(seed+1, seed+2))
	var rngMu sync.Mutex
	rnd := func() float64 { rngMu.Lock(); defer rngMu.Unlock(); return rng.Float64() }

	const retryYAML = "{max_attempts: 10, max_elapsed: 4s}"
	opts := gwOptions{
		extra: fmt.Sprintf("endpoints:\n  - {id: a, tenant: acme, url: %q, timeout: 300ms, retry: %s}\n  - {id: gx, tenant: globex, url: %q, timeout: 300ms, retry: %s}\n",
			rcv.url("a", "v1"), retryYAML, rcv.url("gx", "v1"), retryYAML),
		config: func(c *config.Config) {
			c.Retention = config.Duration(5 * time.Second)
			c.Delivery.Retry.MaxElapsed = config.Duration(4 * time.Second)
			c.Delivery.Retry.MaxAttempts = 10
		},
	}
	g := startGateway(t, opts)
	s := &scenario{t: t, client: &http.Client{Timeout: 10 * time.Second}}
	s.cur.Store(g)

	for _, ep := range []jsonMap{
		{"id": "c", "tenant": "acme", "url": rcv.url("c", "v1"), "timeout": "300ms"},
		{"id": "d", "tenant": "acme", "url": rcv.url("d", "v1"), "timeout": "300ms", "event_types": []string{"invoice.*"}, "max_in_flight": 3},
		{"id": "e", "tenant": "acme", "url": rcv.url("e", "v1"), "timeout": "300ms", "sources": []string{"sw"}, "rate_limit": 300},
		{"id": "f", "tenant": "acme", "url": rcv.url("f", "v1"), "timeout": "300ms", "sources": []string{"open"}},
	} {
		must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken, ep))
	}
	secrets := map[string][]string{}
	for _, id := range []string{"a", "gx", "c", "d", "e", "f"} {
		secrets[id] = []string{must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/"+id, opToken, nil)).Secret}
	}

	// Providers: each event is sent once, resent in sequence, or sent
	// three times at once; some get a resend with another body.
	var evMu sync.Mutex
	var events []*scenEvent
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	const providers = 5
	untilStopped(&pwg, stop, providers, func(p, i int) bool {
		src := []string{"sw", "open", "other"}[int(rnd()*2.4)]
		typ := []string{"invoice.paid", "customer.created"}[int(rnd()*2)]
		eid := fmt.Sprintf("p%d-%d", p, i)
		body := fmt.Appendf(nil, `{"id":%q,"type":%q,"n":%d}`, eid, typ, i)
		ev := &scenEvent{source: src, eid: eid, typ: typ, body: body}
		if src == "other" {
			ev.typ = ""
		}
		evMu.Lock()
		events = append(events, ev)
		evMu.Unlock()
		headers := func() map[string]string {
			switch src {
			case "sw":
				return signSW(eid, time.Now(), body)
			case "other":
				return map[string]string{"Idempotency-Key": eid}
			}
			return nil
		}
		// sendUntilAnswered is a provider retrying until it gets an answer
		// (the gateway may be restarting).
		sendUntilAnswered := func(b []byte) (int, http.Header, []byte) {
			deadline := time.Now().Add(15 * time.Second)
			for {
				h := headers()
				if !bytes.Equal(b, body) && src == "sw" {
					h = signSW(eid, time.Now(), b)
				}
				st, hdr, rb, err := s.ingest(src, b, h)
				if err == nil && st != 503 {
					return st, hdr, rb
				}
				if time.Now().After(deadline) {
					s.errorf("event %s/%s: no answer in 15s: %d %v", src, eid, st, err)
					return 0, nil, nil
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		record := func(st int, hdr http.Header, rb []byte) {
			if st == 0 {
				return
			}
			if st != 202 {
				s.errorf("event %s/%s: %d %s", src, eid, st, rb)
				return
			}
			evMu.Lock()
			defer evMu.Unlock()
			if ev.firstOK.IsZero() {
				ev.firstOK = time.Now()
			}
			ev.answers = append(ev.answers, string(rb))
			ev.replayedFlags = append(ev.replayedFlags, hdr.Get(inbound.HeaderReplayed) == "true")
		}
		ev.firstSend = time.Now()
		switch m := rnd(); {
		case m < 0.5:
			record(sendUntilAnswered(body))
		case m < 0.8:
			for range 1 + int(rnd()*3) {
				record(sendUntilAnswered(body))
			}
		default:
			var wg sync.WaitGroup
			for range 3 {
				wg.Add(1)
				go func() { defer wg.Done(); record(sendUntilAnswered(body)) }()
			}
			wg.Wait()
		}
		if rnd() < 0.1 {
			other := fmt.Appendf(nil, `{"id":%q,"type":%q,"n":%d,"changed":true}`, eid, typ, i)
			st, _, _ := sendUntilAnswered(other)
			evMu.Lock()
			ev.wrongBodyStatus = st
			evMu.Unlock()
		}
		time.Sleep(time.Duration(5+rnd()*20) * time.Millisecond)
		return true
	})

	// acmeEventIDs returns gateway ids of acme events acknowledged so far.
	acmeEventIDs := func() []string {
		evMu.Lock()
		defer evMu.Unlock()
		var ids []string
		for _, ev := range events {
			if ev.source == "sw" && len(ev.answers) > 0 {
				var a struct{ ID string }
				_ = json.Unmarshal([]byte(ev.answers[0]), &a)
				ids = append(ids, a.ID)
			}
		}
		return ids
	}

	// Operators: single replays and manual retries while ingest goes on.
	opStop := make(chan struct{})
	var owg sync.WaitGroup
	owg.Add(1)
	go func() {
		defer owg.Done()
		for {
			select {
			case <-opStop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ids := acmeEventIDs()
			if len(ids) == 0 {
				continue
			}
			id := ids[int(rnd()*float64(len(ids)))]
			if rnd() < 0.5 {
				st, b, err := s.admin("POST", "/events/"+id+"/replay", acmeToken, nil)
				if err == nil && st != 202 && st != 410 && st != 503 {
					s.errorf("replay %s: %d %s", id, st, b)
				}
				continue
			}
			st, b, err := s.admin("GET", "/deliveries?event="+id, acmeToken, nil)
			if err != nil || st != 200 {
				continue
			}
			var l admin.List[admin.Delivery]
			_ = json.Unmarshal(b, &l)
			if len(l.Data) == 0 {
				continue
			}
			d := l.Data[int(rnd()*float64(len(l.Data)))]
			st, b, err = s.admin("POST", "/deliveries/"+d.ID+"/retry", acmeToken, nil)
			if err == nil && st != 202 && st != 409 && st != 404 && st != 503 {
				s.errorf("retry %s: %d %s", d.ID, st, b)
			}
		}
	}()
	// Retention sweeps, more often than the gateway's minute.
	owg.Add(1)
	go func() {
		defer owg.Done()
		for {
			select {
			case <-opStop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			if g := s.cur.Load(); g != nil {
				g.bg.purge(t.Context())
			}
		}
	}()

	start := time.Now()
	at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) }
	patch := func(id string, body jsonMap) {
		t.Helper()
		must[admin.Endpoint](t, 200)(s.cur.Load().api("PATCH", "/endpoints/"+id, acmeToken, body))
	}

	at(500 * time.Millisecond)
	patch("c", jsonMap{"url": rcv.url("c", "v2")})
	cMoved := time.Now()

	at(800 * time.Millisecond)
	fDeleteStart := time.Now()
	if st, _, b := g.api("DELETE", "/endpoints/f", acmeToken, nil); st != 204 {
		t.Fatalf("delete f: %d %s", st, b)
	}
	fDeleted := time.Now()

	at(1000 * time.Millisecond)
	dDisableStart := time.Now()
	patch("d", jsonMap{"disabled": true})
	dDisabled := time.Now()

	at(1500 * time.Millisecond)
	eRotateStart := time.Now()
	rot := must[admin.Endpoint](t, 200)(g.api("POST", "/endpoints/e/rotate-secret", acmeToken, nil))
	secrets["e"] = append(secrets["e"], rot.Secret)
	eRotated := time.Now()
	t.Logf("e rotated %s..%s", eRotateStart.UTC().Format(time.RFC3339Nano), eRotated.UTC().Format(time.RFC3339Nano))

	at(2000 * time.Millisecond)
	dEnableStart := time.Now()
	patch("d", jsonMap{"disabled": false})
	dEnabled := time.Now()
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))

	at(2500 * time.Millisecond)
	t.Logf("restart from %s", time.Now().UTC().Format(time.RFC3339Nano))
	g = g.restart(opts)
	s.cur.Store(g)
	t.Logf("restarted at %v (%s)", time.Since(start), time.Now().UTC().Format(time.RFC3339Nano))

	at(3000 * time.Millisecond)
	fRecreateStart := time.Now()
	fv2 := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "f", "url": rcv.url("f", "v2"), "timeout": "300ms", "sources": []string{"open"}}))
	secrets["f"] = append(secrets["f"], fv2.Secret)
	fRecreated := time.Now()
	eRotate2Start := time.Now()
	rot2 := must[admin.Endpoint](t, 200)(g.api("POST", "/endpoints/e/rotate-secret", acmeToken, jsonMap{"grace": "0s"}))
	secrets["e"] = append(secrets["e"], rot2.Secret)
	eRotated2 := time.Now()

	at(3500 * time.Millisecond)
	patch("c", jsonMap{"url": rcv.url("c", "v3")})
	cMoved2 := time.Now()
	job2 := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "sw"}))

	at(5000 * time.Millisecond)
	close(stop)
	pwg.Wait()
	close(opStop)
	owg.Wait()
	t.Logf("ingest over after %v: %d events", time.Since(start), len(events))
	// The first job may have been cut by the restart: it goes on.
	waitReplay(t, g, acmeToken, job.ID)
	waitReplay(t, g, acmeToken, job2.ID)

	// Expected (event, endpoint) pairs.
	type pair struct {
		ev *scenEvent
		ep string
	}
	var required, optional []pair
	keyOf := map[string]*scenEvent{}
	tenantOf := func(src string) string {
		if src == "other" {
			return "globex"
		}
		return "acme"
	}
	for _, ev := range events {
		if len(ev.answers) == 0 {
			continue
		}
		var a struct {
			ID      string `json:"id"`
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal([]byte(ev.answers[0]), &a)
		ev.gwID = a.ID
		if a.EventID != ev.eid {
			t.Errorf("event %s/%s: answer %s names another provider id", ev.source, ev.eid, ev.answers[0])
		}
		keyOf[storage.IdempotencyKey(tenantOf(ev.source), ev.source, ev.eid)] = ev
		if ev.source == "other" {
			required = append(required, pair{ev, "gx"})
			continue
		}
		required = append(required, pair{ev, "a"}, pair{ev, "c"})
		if ev.source == "sw" {
			required = append(required, pair{ev, "e"})
		}
		if ev.source == "open" && ev.firstSend.After(fRecreated) {
			required = append(required, pair{ev, "f"})
		}
		if strings.HasPrefix(ev.typ, "invoice.") {
			if ev.firstOK.Before(dDisableStart) || ev.firstSend.After(dEnabled) {
				required = append(required, pair{ev, "d"})
			} else {
				optional = append(optional, pair{ev, "d"})
			}
		}
	}

	// Drain: every required pair processed by the receiver, or its
	// delivery visibly failed.
	rcv.calm.Store(true)
	failedVisibly := func(p pair) string {
		st, b, err := s.admin("GET", "/deliveries?event="+p.ev.gwID+"&endpoint="+p.ep, opToken, nil)
		if err != nil || st != 200 {
			return fmt.Sprintf("deliveries: %d %s %v", st, b, err)
		}
		var l admin.List[admin.Delivery]
		_ = json.Unmarshal(b, &l)
		for _, d := range l.Data {
			if d.State == "failed" {
				return ""
			}
		}
		return fmt.Sprintf("deliveries %s", b)
	}
	deadline := time.Now().Add(12 * time.Second)
	var missing []pair
	for {
		missing = missing[:0]
		for _, p := range required {
			if !rcv.isProcessed(p.ep, storage.IdempotencyKey(tenantOf(p.ev.source), p.ev.source, p.ev.eid)) {
				missing = append(missing, p)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range missing {
		if why := failedVisibly(p); why != "" {
			t.Errorf("acknowledged event %s (%s/%s, type %q, sent %v..%v) never processed by endpoint %s, and no failed delivery shows it: %s",
				p.ev.gwID, p.ev.source, p.ev.eid, p.ev.typ, p.ev.firstSend.Sub(start), p.ev.firstOK.Sub(start), p.ep, why)
		} else {
			t.Logf("event %s to %s failed visibly", p.ev.gwID, p.ep)
		}
	}

	// Providers: every 2xx of one event is the same answer; a resend with
	// another body is 422.
	for _, ev := range events {
		for i, a := range ev.answers {
			if a != ev.answers[0] {
				t.Errorf("event %s/%s: answer %d %s differs from the first %s", ev.source, ev.eid, i, a, ev.answers[0])
			}
		}
		if n := len(ev.replayedFlags) - countOf(ev.replayedFlags, true); n > 1 {
			t.Errorf("event %s/%s: %d answers not marked replayed", ev.source, ev.eid, n)
		}
		if ev.wrongBodyStatus != 0 && ev.wrongBodyStatus != 422 {
			t.Errorf("event %s/%s: resend with another body got %d, want 422", ev.source, ev.eid, ev.wrongBodyStatus)
		}
	}
	for _, e := range s.errs {
		t.Error(e)
	}

	// Every request the receiver got, once nothing is live any more.
	testsupport.WaitFor(t, 10*time.Second, "every delivery to be final", func() bool {
		for _, st := range []string{"pending", "delivering"} {
			code, b, err := s.admin("GET", "/deliveries?status="+st+"&limit=1", opToken, nil)
			if err != nil || code != 200 || !bytes.Contains(b, []byte(`"data":[]`)) {
				return false
			}
		}
		return true
	})
	reqs := rcv.snapshot()
	type epKeyN struct{ ep, key, n, ts string }
	seen := map[epKeyN][]int{}
	for _, q := range reqs {
		ev := keyOf[q.key]
		where := fmt.Sprintf("request to %s/%s (key %s, attempt %s, at %v)", q.ep, q.ver, q.key, q.attempt, q.at.Sub(start))
		if ev == nil {
			t.Errorf("%s: key of no acknowledged event", where)
			continue
		}
		if q.wid != q.key {
			t.Errorf("%s: webhook-id %q", where, q.wid)
		}
		if !bytes.Equal(q.body, ev.body) || q.ctype != "application/json" || q.source != ev.source || q.typ != ev.typ {
			t.Errorf("%s: body %q type %q source %q content type %q; want %q %q %q", where, q.body, q.typ, q.source, q.ctype, ev.body, ev.typ, ev.source)
		}
		// Filters and tenants.
		switch q.ep {
		case "gx":
			if ev.source != "other" {
				t.Errorf("%s: acme event at globex's endpoint", where)
			}
		case "a", "c":
			if ev.source == "other" {
				t.Errorf("%s: globex event at acme's endpoint", where)
			}
		case "d":
			if ok, _ := path.Match("invoice.*", ev.typ); !ok || ev.source == "other" {
				t.Errorf("%s: type %q outside d's filter", where, ev.typ)
			}
		case "f":
			if ev.source != "open" {
				t.Errorf("%s: source %q outside f's filter", where, ev.source)
			}
			if q.ver == "v1" && q.at.After(fDeleted.Add(time.Second)) {
				t.Errorf("%s: sent to f after it was deleted", where)
			}
			if q.ver == "v2" && ev.firstOK.Before(fRecreateStart) && ev.firstSend.After(fDeleted) {
				t.Errorf("%s: event acknowledged while f did not exist (%v..%v) sent to the new f", where, ev.firstSend.Sub(start), ev.firstOK.Sub(start))
			}
			if q.ver == "v2" && ev.firstOK.Before(fDeleteStart) {
				t.Errorf("%s: the deleted f's event (%v..%v) sent to the new f", where, ev.firstSend.Sub(start), ev.firstOK.Sub(start))
			}
		case "e":
			if ev.source != "sw" {
				t.Errorf("%s: source %q outside e's filter", where, ev.source)
			}
		}
		// Signatures, checked with crypto/hmac.
		sec := secrets[q.ep]
		ok := false
		for _, sc := range sec {
			ok = ok || swVerify(sc, q.wid, q.ts, q.body, q.sig)
		}
		if !ok {
			t.Errorf("%s: signature %q verifies with no secret of the endpoint", where, q.sig)
		}
		ts, err := strconv.ParseInt(q.ts, 10, 64)
		if err != nil || time.Unix(ts, 0).Sub(q.at).Abs() > 2*time.Second {
			t.Errorf("%s: webhook-timestamp %q, received at unix %d", where, q.ts, q.at.Unix())
		}
		if n, err := strconv.Atoi(q.attempt); err != nil || n < 1 {
			t.Errorf("%s: hookgate-attempt %q", where, q.attempt)
		}
		if q.ep == "e" && err == nil {
			signedAt := time.Unix(ts, 0)
			if q.at.After(eRotated2.Add(time.Second)) {
				if n := len(strings.Fields(q.sig)); n != 1 || !swVerify(rot2.Secret, q.wid, q.ts, q.body, q.sig) {
					t.Errorf("%s: signed %v after a rotation without grace: %d signatures, with the new secret: %v", where, signedAt.Sub(eRotated2), n, swVerify(rot2.Secret, q.wid, q.ts, q.body, q.sig))
				}
			} else if q.at.After(eRotated.Add(time.Second)) && q.at.Before(eRotate2Start) && (!swVerify(rot.Secret, q.wid, q.ts, q.body, q.sig) || !swVerify(secrets["e"][0], q.wid, q.ts, q.body, q.sig)) {
				t.Errorf("%s: signed %v after the rotation, not with the new secret", where, signedAt.Sub(eRotated))
			}
			if q.at.Before(eRotateStart) && !swVerify(secrets["e"][0], q.wid, q.ts, q.body, q.sig) {
				t.Errorf("%s: signed before the rotation, not with the first secret", where)
			}
		}
		if q.ep == "c" {
			if (q.ver == "v1" && q.at.After(cMoved.Add(time.Second))) || (q.ver == "v2" && q.at.After(cMoved2.Add(time.Second))) {
				t.Errorf("%s: sent to c's old URL after it moved", where)
			}
		}
		if q.ep == "d" && q.at.After(dDisabled.Add(time.Second)) && q.at.Before(dEnableStart) {
			t.Errorf("%s: sent to d while it was disabled", where)
		}
		k := epKeyN{q.ep, q.key, q.attempt, q.ts}
		seen[k] = append(seen[k], q.answer)
	}

	// The store's records against what the receiver saw, for every event
	// retention has not purged.
	checked := 0
	for _, ev := range events {
		if ev.gwID == "" {
			continue
		}
		st, b, _ := s.admin("GET", "/deliveries?event="+ev.gwID+"&limit=100", opToken, nil)
		if st != 200 {
			continue
		}
		var l admin.List[admin.Delivery]
		_ = json.Unmarshal(b, &l)
		for _, d := range l.Data {
			want := storage.IdempotencyKey(tenantOf(ev.source), ev.source, ev.eid)
			if d.IdempotencyKey != want {
				t.Errorf("delivery %s of %s: key %s, want %s", d.ID, ev.gwID, d.IdempotencyKey, want)
			}
			st, b, _ := s.admin("GET", "/deliveries/"+d.ID, opToken, nil)
			if st != 200 {
				continue
			}
			var full admin.Delivery
			_ = json.Unmarshal(b, &full)
			checked++
			if full.State != "succeeded" && full.State != "failed" && full.State != "cancelled" {
				t.Errorf("delivery %s (%s to %s) still %s after the drain: %s", d.ID, ev.gwID, d.Endpoint, full.State, b)
			}
			var ats []admin.Attempt
			if full.Attempts != nil {
				ats = *full.Attempts
			}
			if len(ats) != full.AttemptCount {
				t.Errorf("delivery %s: %d attempts listed, attempt_count %d", d.ID, len(ats), full.AttemptCount)
			}
			for i, a := range ats {
				if a.N != i+1 {
					t.Errorf("delivery %s: attempt %d numbered %d", d.ID, i+1, a.N)
				}
				if a.StatusCode == 0 {
					continue
				}
				aat, _ := time.Parse(time.RFC3339Nano, a.At)
				answers := seen[epKeyN{d.Endpoint, d.IdempotencyKey, strconv.Itoa(a.N), strconv.FormatInt(aat.Unix(), 10)}]
				if !slices.Contains(answers, a.StatusCode) {
					for _, q := range reqs {
						if q.ep == d.Endpoint && q.key == d.IdempotencyKey {
							t.Logf("  receiver: %s/%s attempt %s ts %s at %s answer %d %s", q.ep, q.ver, q.attempt, q.ts, q.at.UTC().Format(time.RFC3339Nano), q.answer, q.outcome)
						}
					}
					t.Logf("  attempts: %+v (created %s)", ats, full.CreatedAt)
					t.Errorf("delivery %s to %s: attempt %d at %s recorded status %d; the receiver answered %v to that attempt", d.ID, d.Endpoint, a.N, a.At, a.StatusCode, answers)
				}
			}
			if full.State == "succeeded" && (len(ats) == 0 || ats[len(ats)-1].StatusCode/100 != 2) {
				t.Errorf("delivery %s succeeded without a 2xx attempt: %s", d.ID, b)
			}
		}
	}
	t.Logf("%d requests at the receiver, %d required pairs, %d optional, %d deliveries checked against the receiver, %v in all",
		len(reqs), len(required), len(optional), checked, time.Since(start))
}

func countOf[T comparable](s []T, v T) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

func envOr(k, def string) string {
	if v, ok := os.LookupEnv(k); ok {
		return v
	}
	return def
}

// TestExactlyOnceAcrossDedupeExpiryGoneAndRestart: providers resend events
// after the dedupe window (new events, same Idempotency-Key), an endpoint
// answers 410 once (disabled, its delivery failed), is enabled again, the
// gateway restarts, and a bulk replay of the failed deliveries follows.
// Every event acknowledged while the endpoint was enabled reaches it; the
// receiver, deduping on Idempotency-Key, processes each logical event once
// per endpoint; every request carries the key of its logical event.
func TestExactlyOnceAcrossDedupeExpiryGoneAndRestart(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(envOr("HOOKGATE_CHAOS_SEED", ""), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d", seed)
	rcv := newChaosReceiver(t, seed)
	rng := rand.New(rand.NewPCG(seed+1, seed+2))
	var rngMu sync.Mutex
	rnd := func() float64 { rngMu.Lock(); defer rngMu.Unlock(); return rng.Float64() }
	opts := gwOptions{ttl: "1s", extra: fmt.Sprintf("endpoints:\n  - {id: a, tenant: acme, url: %q, timeout: 300ms, retry: {max_attempts: 10}}\n", rcv.url("a", "v1"))}
	g := startGateway(t, opts)
	s := &scenario{t: t, client: &http.Client{Timeout: 10 * time.Second}}
	s.cur.Store(g)
	ge := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "g", "url": rcv.url("g", "v1"), "timeout": "300ms", "sources": []string{"open"}, "retry": jsonMap{"max_attempts": 10}}))
	secrets := map[string]string{"g": ge.Secret, "a": must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/a", acmeToken, nil)).Secret}

	type sent struct {
		eid      string
		body     []byte
		first    time.Time
		ok       time.Time
		gwIDs    []string // one per dedupe window
		replayed []bool
	}
	var mu sync.Mutex
	var evs []*sent
	stop := make(chan struct{})
	var wg sync.WaitGroup
	post := func(ev *sent) {
		for deadline := time.Now().Add(15 * time.Second); ; {
			st, hdr, b, err := s.ingest("open", ev.body, nil)
			if err == nil && st == 202 {
				var a struct {
					ID string `json:"id"`
				}
				_ = json.Unmarshal(b, &a)
				mu.Lock()
				if ev.ok.IsZero() {
					ev.ok = time.Now()
				}
				ev.gwIDs = append(ev.gwIDs, a.ID)
				ev.replayed = append(ev.replayed, hdr.Get(inbound.HeaderReplayed) == "true")
				mu.Unlock()
				return
			}
			if err == nil && st != 503 {
				s.errorf("event %s: %d %s", ev.eid, st, b)
				return
			}
			if time.Now().After(deadline) {
				s.errorf("event %s: no answer: %v", ev.eid, err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	untilStopped(&wg, stop, 4, func(p, i int) bool {
		eid := fmt.Sprintf("q%d-%d", p, i)
		ev := &sent{eid: eid, body: fmt.Appendf(nil, `{"id":%q,"type":"t","n":%d}`, eid, i), first: time.Now()}
		mu.Lock()
		evs = append(evs, ev)
		mu.Unlock()
		post(ev)
		if rnd() < 0.3 {
			// The provider's retry after the window (1s): a new event.
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(1200 * time.Millisecond)
				post(ev)
			}()
		}
		time.Sleep(time.Duration(10+rnd()*20) * time.Millisecond)
		return true
	})

	start := time.Now()
	at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) }
	at(time.Second)
	// g answers 410 until the gateway has disabled it: one 410 would be
	// lost to an attempt that timed out on a loaded machine, and an
	// endpoint paused by its circuit sees its next request only after the
	// cool-down (5s).
	setGone := func(on bool) {
		rcv.mu.Lock()
		rcv.gone["g"] = on
		rcv.mu.Unlock()
	}
	setGone(true)
	goneArmed := time.Now()
	testsupport.WaitFor(t, 15*time.Second, "g to be disabled by its 410", func() bool {
		return must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/g", acmeToken, nil)).Disabled
	})
	goneSeen := time.Now()
	setGone(false)
	at(2000 * time.Millisecond)
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/g", acmeToken, jsonMap{"disabled": false}))
	gEnabled := time.Now()
	at(2500 * time.Millisecond)
	g = g.restart(opts)
	s.cur.Store(g)
	at(3000 * time.Millisecond)
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"endpoint": "g", "status": "failed"}))
	at(4000 * time.Millisecond)
	close(stop)
	wg.Wait()
	if j := waitReplay(t, g, acmeToken, job.ID); j.State != "completed" || j.Enqueued < 1 {
		t.Errorf("replay of the failed deliveries: %+v", j)
	}
	for _, e := range s.errs {
		t.Error(e)
	}
	rcv.calm.Store(true)

	keyOf := map[string]*sent{}
	type pair struct {
		ev *sent
		ep string
	}
	var required []pair
	for _, ev := range evs {
		if len(ev.gwIDs) == 0 {
			continue
		}
		keyOf[storage.IdempotencyKey("acme", "open", ev.eid)] = ev
		required = append(required, pair{ev, "a"})
		if ev.ok.Before(goneArmed) || ev.first.After(gEnabled) {
			required = append(required, pair{ev, "g"})
		}
		// A resend after the window is a new event, not a replay.
		if len(ev.gwIDs) == 2 && (ev.replayed[1] || ev.gwIDs[1] == ev.gwIDs[0]) {
			t.Errorf("event %s resent after the 1s window: answer %v replayed %v", ev.eid, ev.gwIDs, ev.replayed)
		}
	}
	var missing []pair
	// A liveness bound, not a speed one: under -race on a loaded machine
	// the retries of the gone window take tens of seconds.
	testsupport.WaitFor(t, time.Minute, "every acknowledged event at its endpoints", func() bool {
		missing = missing[:0]
		for _, p := range required {
			if !rcv.isProcessed(p.ep, storage.IdempotencyKey("acme", "open", p.ev.eid)) {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 && time.Since(start) > 70*time.Second {
			return true
		}
		return len(missing) == 0
	})
	for _, p := range missing {
		st, b, _ := s.admin("GET", "/deliveries?event="+p.ev.gwIDs[0]+"&endpoint="+p.ep, opToken, nil)
		t.Errorf("event %s (%v, sent %v..%v) never processed by %s: %d %s", p.ev.eid, p.ev.gwIDs, p.ev.first.Sub(start), p.ev.ok.Sub(start), p.ep, st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "every delivery to be final", func() bool {
		for _, st := range []string{"pending", "delivering"} {
			code, b, err := s.admin("GET", "/deliveries?status="+st+"&limit=1", opToken, nil)
			if err != nil || code != 200 || !bytes.Contains(b, []byte(`"data":[]`)) {
				return false
			}
		}
		return true
	})
	for _, q := range rcv.snapshot() {
		ev := keyOf[q.key]
		where := fmt.Sprintf("request to %s (key %s, attempt %s, at %v)", q.ep, q.key, q.attempt, q.at.Sub(start))
		if ev == nil {
			t.Errorf("%s: key of no acknowledged event", where)
			continue
		}
		if q.wid != q.key || !bytes.Equal(q.body, ev.body) {
			t.Errorf("%s: webhook-id %s, body %s, want %s", where, q.wid, q.body, ev.body)
		}
		if !swVerify(secrets[q.ep], q.wid, q.ts, q.body, q.sig) {
			t.Errorf("%s: signature does not verify", where)
		}
		if q.ep == "g" && q.outcome != "410" && q.at.After(goneArmed) && q.at.Before(gEnabled) {
			// Attempts in flight at the disable may still arrive; none is
			// started a second after it was seen.
			if ts, _ := strconv.ParseInt(q.ts, 10, 64); time.Unix(ts, 0).After(goneSeen.Add(time.Second)) {
				t.Errorf("%s: sent while g was disabled", where)
			}
		}
	}
	// One delivery per (event, endpoint) at ingest; the bulk replay adds
	// one to g where g's delivery failed (the 410).
	for _, ev := range evs {
		for _, id := range ev.gwIDs {
			l := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+id, opToken, nil))
			per := map[string]int{}
			failed := 0
			for _, d := range l.Data {
				per[d.Endpoint]++
				if d.Endpoint == "g" && d.State == "failed" {
					failed++
				}
			}
			if per["a"] != 1 || per["g"] > 1+failed {
				t.Errorf("event %s (%s): deliveries per endpoint %v, %d failed at g", id, ev.eid, per, failed)
			}
		}
	}
	// Every delivery of every stored event carries the logical event's key.
	l := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?limit=1000", opToken, nil))
	for _, d := range l.Data {
		if keyOf[d.IdempotencyKey] == nil {
			t.Errorf("delivery %s of %s: key %s of no event", d.ID, d.Event, d.IdempotencyKey)
		}
	}
	t.Logf("%d events, %d required pairs, %d deliveries listed, %v", len(evs), len(required), len(l.Data), time.Since(start))
}
