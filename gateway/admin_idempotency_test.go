package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
)

func countEndpoints(t *testing.T, g *gw) int {
	t.Helper()
	return len(must[apiList[endpointView]](t, 200)(g.api("GET", "/endpoints?limit=1000", opToken, nil)).Data)
}

func TestAdminIdempotencyKey(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"url":"http://receiver.test/a"}`

	// First: executed. Again: the stored answer, byte for byte, not executed.
	st, hdr, first := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "k1")
	if st != 201 || hdr.Get(headerReplayed) != "" {
		t.Fatalf("first: %d %s", st, first)
	}
	st, hdr, again := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "k1")
	if st != 201 || string(again) != string(first) || hdr.Get(headerReplayed) != "true" || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("replay: %d %s %v", st, again, hdr)
	}
	if n := countEndpoints(t, g); n != 1 {
		t.Fatalf("%d endpoints after a replayed POST, want 1", n)
	}

	// The same key for another request: 422.
	for name, req := range map[string][2]string{
		"other body": {"/endpoints", `{"url":"http://receiver.test/b"}`},
		"other path": {"/sources", body},
	} {
		p := wantProblem(t, name, 422, "Idempotency-Key")(g.api("POST", req[0], acmeToken, req[1], "Idempotency-Key", "k1"))
		if !strings.HasSuffix(p.Type, "idempotency-key-reused") {
			t.Fatalf("%s: %+v", name, p)
		}
	}
	// Keys are scoped to the token's tenant: the operator's k1 is another key.
	if st, hdr, b := g.api("POST", "/endpoints", opToken, body, "Idempotency-Key", "k1"); st != 201 || hdr.Get(headerReplayed) != "" {
		t.Fatalf("operator's k1: %d %s", st, b)
	}
	// Without a key every POST runs.
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, body))
	if n := countEndpoints(t, g); n != 3 {
		t.Fatalf("%d endpoints, want 3", n)
	}

	// A refusal (4xx) is an answer too: stored and replayed.
	bad := `{"url":"ftp://x"}`
	wantProblem(t, "invalid", 422, "url")(g.api("POST", "/endpoints", acmeToken, bad, "Idempotency-Key", "k2"))
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, bad, "Idempotency-Key", "k2")
	wantProblem(t, "replayed invalid", 422, "url")(st, hdr, b)
	if hdr.Get(headerReplayed) != "true" {
		t.Fatalf("a stored 422 was not replayed: %v", hdr)
	}
	// Other POSTs honour it too: a replay of an event runs once.
	rcv := newReceiver(t)
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "r", "url": rcv.url("r")}))
	_, _, eb := g.post("open", []byte(`{"id":"idem-ev"}`), nil)
	evt := must[jsonMap](t, 202)(202, nil, eb)["id"].(string)
	to := jsonMap{"endpoints": []string{"r"}}
	r1 := must[apiList[deliveryView]](t, 202)(g.api("POST", "/events/"+evt+"/replay", acmeToken, to, "Idempotency-Key", "rk"))
	r2 := must[apiList[deliveryView]](t, 202)(g.api("POST", "/events/"+evt+"/replay", acmeToken, to, "Idempotency-Key", "rk"))
	if len(r1.Data) != 1 || len(r2.Data) != 1 || r1.Data[0].ID != r2.Data[0].ID {
		t.Fatalf("replays %+v / %+v", r1, r2)
	}
	if n := len(must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?endpoint=r&event="+evt, acmeToken, nil)).Data); n != 2 {
		t.Fatalf("%d deliveries, want the original and one replay", n)
	}

	// Keys that cannot be stored are refused.
	wantProblem(t, "long key", 400, "Idempotency-Key")(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", strings.Repeat("k", 256)))
	// A key sent empty, or only blanks (trimmed by HTTP), is not "no key":
	// running such a request twice is what its sender wanted to avoid.
	for _, k := range []string{"", " ", "\t"} {
		wantProblem(t, fmt.Sprintf("key %q", k), 400, "Idempotency-Key")(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", k))
	}
	two := fmt.Sprintf("POST /api/v1/endpoints HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer %s\r\nIdempotency-Key: a\r\nIdempotency-Key: b\r\n"+
		"Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", acmeToken)
	wantProblem(t, "two keys", 400, "Idempotency-Key")(rawRequest(t, g.AdminAddr(), two))
	// GET ignores the header.
	must[apiList[endpointView]](t, 200)(g.api("GET", "/endpoints", acmeToken, nil, "Idempotency-Key", "k1"))
}

// TestAdminIdempotencyConcurrent: 50 identical POSTs at once have exactly
// one effect; each gets the first answer, or 409 with Retry-After while it
// is still running.
func TestAdminIdempotencyConcurrent(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"url":"http://receiver.test/storm"}` // no id: each execution would make a new endpoint
	const n = 50
	type answer struct {
		st         int
		body       string
		retryAfter string
		replayed   bool
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "storm")
			answers[i] = answer{st, string(b), hdr.Get("Retry-After"), hdr.Get(headerReplayed) == "true"}
		})
	}
	wg.Wait()
	if c := countEndpoints(t, g); c != 1 {
		t.Fatalf("%d endpoints from %d identical requests, want exactly 1", c, n)
	}
	var created string
	fresh := 0
	for i, a := range answers {
		switch {
		case a.st == 201 && !a.replayed:
			fresh++
			created = a.body
		case a.st == 201:
		case a.st == 409:
			if s, err := strconv.Atoi(a.retryAfter); err != nil || s < 1 {
				t.Fatalf("answer %d: 409 with Retry-After %q", i, a.retryAfter)
			}
		default:
			t.Fatalf("answer %d: %d %s", i, a.st, a.body)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d requests executed, want 1", fresh)
	}
	for i, a := range answers {
		if a.st == 201 && a.body != created {
			t.Fatalf("answer %d differs from the first: %s vs %s", i, a.body, created)
		}
	}
	// Once done, a retry gets the answer.
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "storm")
	if st != 201 || string(b) != created || hdr.Get(headerReplayed) != "true" {
		t.Fatalf("after the storm: %d %s", st, b)
	}
}

// TestAdminIdempotencyCrashedClaim: a request that died while holding its
// key (a claim with no answer) blocks retries until its lease ends; then
// the next retry executes it. A different request with that key is still
// a different request, also after the lease: 422.
func TestAdminIdempotencyCrashedClaim(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := []byte(`{"id":"after-crash","url":"http://receiver.test/c"}`)
	now := time.Now().UTC()
	res, err := g.Store().ClaimKey(context.Background(), storage.IdemClaim{
		Tenant: "acme", Key: "crash", RequestHash: requestHash("POST", "/api/v1/endpoints", body),
		Now: now, LeaseUntil: now.Add(1500 * time.Millisecond), Remember: now.Add(72 * time.Hour),
	})
	if err != nil || res.State != storage.IdemNew {
		t.Fatalf("claim: %+v %v", res, err)
	}
	other := jsonMap{"id": "crash-other", "url": "http://receiver.test/o"}
	wantProblem(t, "another request while the dead claim holds", 422, "Idempotency-Key")(g.api("POST", "/endpoints", acmeToken, other, "Idempotency-Key", "crash"))
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "crash")
	p := wantProblem(t, "while the dead claim holds", 409, "Idempotency-Key")(st, hdr, b)
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 || ra > 2 {
		t.Fatalf("Retry-After %q: %+v", hdr.Get("Retry-After"), p)
	}
	wantProblem(t, "the endpoint is not created yet", 404, "")(g.api("GET", "/endpoints/after-crash", acmeToken, nil))
	waitFor(t, 10*time.Second, "the lease to expire and the retry to run", func() bool {
		st, _, _ := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "crash")
		return st == 201
	})
	must[endpointView](t, 200)(g.api("GET", "/endpoints/after-crash", acmeToken, nil))
	wantProblem(t, "another request after the retry ran", 422, "Idempotency-Key")(g.api("POST", "/endpoints", acmeToken, other, "Idempotency-Key", "crash"))
	st, hdr, _ = g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "crash")
	if st != 201 || hdr.Get(headerReplayed) != "true" {
		t.Fatalf("after the retry ran: %d %v", st, hdr)
	}
}

// failingCatalog is the real store with PutEndpoint failing on command.
type failingCatalog struct {
	storage.Store
	mu   sync.Mutex
	fail bool
}

func (f *failingCatalog) set(v bool) { f.mu.Lock(); f.fail = v; f.mu.Unlock() }

func (f *failingCatalog) PutEndpoint(ctx context.Context, ep *storage.Endpoint) error {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return errors.New("injected: disk full")
	}
	return f.Store.PutEndpoint(ctx, ep)
}

// TestAdminIdempotencyServerError: a 5xx is not stored, so the retry with
// the same key executes again.
func TestAdminIdempotencyServerError(t *testing.T) {
	var fc *failingCatalog
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store {
		fc = &failingCatalog{Store: s}
		return fc
	}})
	fc.set(true)
	body := jsonMap{"id": "flaky", "url": "http://receiver.test/f"}
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "k5")
	wantProblem(t, "store failure", 503, "")(st, hdr, b)
	if hdr.Get("Retry-After") == "" || strings.Contains(string(b), "disk full") {
		t.Fatalf("503: %v %s", hdr, b)
	}
	fc.set(false)
	st, hdr, b = g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "k5")
	if st != 201 || hdr.Get(headerReplayed) != "" {
		t.Fatalf("retry after a 5xx: %d %s", st, b)
	}
	var ep endpointView
	if err := json.Unmarshal(b, &ep); err != nil || ep.ID != "flaky" {
		t.Fatalf("created %s", b)
	}
}

// POST /deliveries/{id}/retry while the delivery's attempt is in flight
// answers 409 delivery-in-flight with Retry-After: "retry once its attempt
// has ended". A client that sent an Idempotency-Key does that with the
// same key, and the retry is executed (202). The 409 was stored as the
// key's answer and replayed for dedupe.ttl (72h); Stripe stores no answer
// for a request that conflicted with work in progress, for this reason.
func TestIdempotentRetryAfterInFlight409RunsOnceTheAttemptEnded(t *testing.T) {
	held := newHeldReceiver(t)
	g := startGateway(t, gwOptions{extra: "endpoints:\n  - {id: slow, tenant: acme, url: " + held.URL + ", max_in_flight: 1}\n"})
	if st, _, b := g.post("open", []byte(`{"id":"e1","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	held.waitHit(t)
	dl := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries", acmeToken, nil)).Data[0]

	st, hdr, b := g.api("POST", "/deliveries/"+dl.ID+"/retry", acmeToken, nil, "Idempotency-Key", "retry-1")
	p := wantProblem(t, "retry in flight", 409, "")(st, hdr, b)
	if !strings.HasSuffix(p.Type, "delivery-in-flight") || hdr.Get("Retry-After") == "" {
		t.Fatalf("problem %+v, Retry-After %q", p, hdr.Get("Retry-After"))
	}
	held.release()
	waitFor(t, 10*time.Second, "the attempt to succeed", func() bool {
		return must[deliveryView](t, 200)(g.api("GET", "/deliveries/"+dl.ID, acmeToken, nil)).State == "succeeded"
	})
	// The client retries as told, with its key.
	st, hdr, b = g.api("POST", "/deliveries/"+dl.ID+"/retry", acmeToken, nil, "Idempotency-Key", "retry-1")
	if st != 202 {
		t.Fatalf("the retry the 409 asked for, with the same Idempotency-Key: %d (Idempotent-Replayed %q, Retry-After %q) %s; "+
			"want 202: a 'retry later' conflict must not be stored as the key's answer",
			st, hdr.Get(headerReplayed), hdr.Get("Retry-After"), b)
	}
}
