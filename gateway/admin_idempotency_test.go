package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
	"hookgate/storage"
)

func countEndpoints(t *testing.T, g *gw) int {
	t.Helper()
	return len(must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints?limit=1000", opToken, nil)).Data)
}

func TestAdminIdempotencyKey(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"url":"http://receiver.test/a"}`

	// First: executed. Again: the stored answer, byte for byte, not executed.
	st, hdr, first := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "k1")
	if st != 201 || hdr.Get(inbound.HeaderReplayed) != "" {
		t.Fatalf("first: %d %s", st, first)
	}
	st, hdr, again := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "k1")
	if st != 201 || string(again) != string(first) || hdr.Get(inbound.HeaderReplayed) != "true" || hdr.Get("Content-Type") != "application/json" {
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
	if st, hdr, b := g.api("POST", "/endpoints", opToken, body, "Idempotency-Key", "k1"); st != 201 || hdr.Get(inbound.HeaderReplayed) != "" {
		t.Fatalf("operator's k1: %d %s", st, b)
	}
	// Without a key every POST runs.
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, body))
	if n := countEndpoints(t, g); n != 3 {
		t.Fatalf("%d endpoints, want 3", n)
	}

	// A refusal (4xx) is an answer too: stored and replayed.
	bad := `{"url":"ftp://x"}`
	wantProblem(t, "invalid", 422, "url")(g.api("POST", "/endpoints", acmeToken, bad, "Idempotency-Key", "k2"))
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, bad, "Idempotency-Key", "k2")
	wantProblem(t, "replayed invalid", 422, "url")(st, hdr, b)
	if hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("a stored 422 was not replayed: %v", hdr)
	}
	// Other POSTs honour it too: a replay of an event runs once.
	rcv := newReceiver(t)
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "r", "url": rcv.url("r")}))
	_, _, eb := g.post("open", []byte(`{"id":"idem-ev"}`), nil)
	evt := must[jsonMap](t, 202)(202, nil, eb)["id"].(string)
	to := jsonMap{"endpoints": []string{"r"}}
	r1 := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", "/events/"+evt+"/replay", acmeToken, to, "Idempotency-Key", "rk"))
	r2 := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", "/events/"+evt+"/replay", acmeToken, to, "Idempotency-Key", "rk"))
	if len(r1.Data) != 1 || len(r2.Data) != 1 || r1.Data[0].ID != r2.Data[0].ID {
		t.Fatalf("replays %+v / %+v", r1, r2)
	}
	if n := len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=r&event="+evt, acmeToken, nil)).Data); n != 2 {
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
	must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints", acmeToken, nil, "Idempotency-Key", "k1"))
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
			answers[i] = answer{st, string(b), hdr.Get("Retry-After"), hdr.Get(inbound.HeaderReplayed) == "true"}
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
	if st != 201 || string(b) != created || hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("after the storm: %d %s", st, b)
	}
}

// TestAdminIdempotencyCrashedClaim: a request that died while holding its
// key (a claim with no answer) blocks retries until its lease ends; then
// the next retry executes it. A different request with that key is still
// a different request, also after the lease: 422.
func TestAdminIdempotencyCrashedClaim(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gwOptions{})
	body := []byte(`{"id":"after-crash","url":"http://receiver.test/c"}`)
	now := time.Now().UTC()
	res, err := g.Store().ClaimKey(context.Background(), storage.IdemClaim{
		Tenant: "acme", Key: "crash", RequestHash: admin.RequestHash("POST", "/api/v1/endpoints", body),
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
	testsupport.WaitFor(t, 10*time.Second, "the lease to expire and the retry to run", func() bool {
		st, _, _ := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "crash")
		return st == 201
	})
	must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/after-crash", acmeToken, nil))
	wantProblem(t, "another request after the retry ran", 422, "Idempotency-Key")(g.api("POST", "/endpoints", acmeToken, other, "Idempotency-Key", "crash"))
	st, hdr, _ = g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "crash")
	if st != 201 || hdr.Get(inbound.HeaderReplayed) != "true" {
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
	if st != 201 || hdr.Get(inbound.HeaderReplayed) != "" {
		t.Fatalf("retry after a 5xx: %d %s", st, b)
	}
	var ep admin.Endpoint
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
	dl := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries", acmeToken, nil)).Data[0]

	st, hdr, b := g.api("POST", "/deliveries/"+dl.ID+"/retry", acmeToken, nil, "Idempotency-Key", "retry-1")
	p := wantProblem(t, "retry in flight", 409, "")(st, hdr, b)
	if !strings.HasSuffix(p.Type, "delivery-in-flight") || hdr.Get("Retry-After") == "" {
		t.Fatalf("problem %+v, Retry-After %q", p, hdr.Get("Retry-After"))
	}
	held.release()
	testsupport.WaitFor(t, 10*time.Second, "the attempt to succeed", func() bool {
		return must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+dl.ID, acmeToken, nil)).State == "succeeded"
	})
	// The client retries as told, with its key.
	st, hdr, b = g.api("POST", "/deliveries/"+dl.ID+"/retry", acmeToken, nil, "Idempotency-Key", "retry-1")
	if st != 202 {
		t.Fatalf("the retry the 409 asked for, with the same Idempotency-Key: %d (Idempotent-Replayed %q, Retry-After %q) %s; "+
			"want 202: a 'retry later' conflict must not be stored as the key's answer",
			st, hdr.Get(inbound.HeaderReplayed), hdr.Get("Retry-After"), b)
	}
}

// afterTTL sends a POST under key until its stored answer has expired
// (dedupe.ttl) and the request is executed again (no Idempotent-Replayed).
func afterTTL[T any](t *testing.T, g *gw, path string, body any, key string, want int) T {
	t.Helper()
	return postUntil[T](t, g, path, body, key, want, "the key's stored answer to expire",
		func(_ int, hdr http.Header) bool { return hdr.Get(inbound.HeaderReplayed) != "true" })
}

// SPEC section 5: an answer is stored for dedupe.ttl; after that the key
// is free, and "the first request with a key is executed". A bulk replay
// sent again with its key once that window has passed (a nightly
// "replay what failed" job with a fixed key, as Stripe allows once a key
// is pruned) must replay again: not answer with the old, completed job
// (the derived id of a job is one use's, not the key's).
func TestBulkReplayKeyReusedAfterTTLRunsAgain(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{ttl: "1s", extra: fmt.Sprintf("endpoints:\n  - {id: r, tenant: acme, url: %q}\n", rcv.url("r"))})
	if st, _, b := g.post("open", []byte(`{"id":"ttl-ev","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "the first delivery", func() bool { return rcv.count() == 1 })

	body := jsonMap{"source": "open"}
	first := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, body, "Idempotency-Key", "nightly"))
	if job := waitReplay(t, g, acmeToken, first.ID); job.State != "completed" || job.Enqueued != 1 {
		t.Fatalf("first replay: %+v", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "the first replay's delivery", func() bool { return rcv.count() == 2 })

	again := afterTTL[admin.Replay](t, g, "/replays", body, "nightly", 202)
	if again.ID == first.ID {
		t.Fatalf("the request with a key whose answer expired (dedupe.ttl) was not executed: it answered 202 "+
			"with the old job %s (state %q, enqueued %d) and started no replay", again.ID, again.State, again.Enqueued)
	}
	waitReplay(t, g, acmeToken, again.ID)
	testsupport.WaitFor(t, 10*time.Second, "the second replay's delivery", func() bool { return rcv.count() == 3 })
}

// The same for POST /endpoints: once the key's answer has expired, the
// request is a new one and must create the endpoint it describes, not
// answer 201 with the endpoint made days earlier under the same key, as
// changed since (here another URL): the client would be told its endpoint
// to url A exists, and nothing would be delivered to A.
func TestCreateEndpointKeyReusedAfterTTLCreatesWhatItAsks(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gwOptions{ttl: "1s"})
	body := jsonMap{"url": "http://receiver.test/a"}
	first := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "setup"))
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/"+first.ID, acmeToken, jsonMap{"url": "http://receiver.test/b"}))

	again := afterTTL[admin.Endpoint](t, g, "/endpoints", body, "setup", 201)
	if again.URL != "http://receiver.test/a" || again.ID == first.ID {
		t.Fatalf("POST /endpoints {url: .../a} with a key whose answer expired answered 201 with endpoint %s, url %s "+
			"(the one an earlier request made and that was changed since); want a new endpoint to .../a", again.ID, again.URL)
	}
}

// A bulk replay run again after its answer was lost must answer with the
// job its first run started, before it checks its filters against the
// catalog as it is now: an endpoint disabled in between (by an operator,
// or by a 410 from the very deliveries the job made) made it answer 409
// endpoint-disabled, "enable it first", stored for dedupe.ttl although the
// job ran; the operator then enabled the endpoint and sent the replay
// again under a new key, and every event went out twice.
func TestCreateReplayRunAgainAfterEndpointDisabledFindsFirstJob(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{
		extra: fmt.Sprintf("endpoints:\n  - {id: r, tenant: acme, url: %q}\n", rcv.url("r")),
		wrapStore: func(s storage.Store) storage.Store {
			return &lostAnswers{Store: s, lease: time.Second}
		},
	})
	if st, _, b := g.post("open", []byte(`{"id":"lost-ev","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	body := jsonMap{"endpoint": "r"}
	first := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, body, "Idempotency-Key", "lost-r"))
	waitReplay(t, g, acmeToken, first.ID)
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/r", acmeToken, jsonMap{"disabled": true}))

	var st int
	var b []byte
	testsupport.WaitFor(t, 10*time.Second, "the lost answer's claim to end and the retry to run", func() bool {
		st, _, b = g.api("POST", "/replays", acmeToken, body, "Idempotency-Key", "lost-r")
		return st != 409 || !strings.Contains(string(b), "idempotency-key-in-progress")
	})
	if st != 202 {
		t.Fatalf("run again after the lost answer: %d %s; want 202 with job %s, which ran", st, b, first.ID)
	}
}

// SPEC section 5: "the same key with a different request: 422". A POST
// whose write was stored but reported failed (503: the key is given up so
// that a retry runs again) has had its effect under its key. Another
// request sent with that key afterwards must be refused with 422, not run
// as a second, unrelated request under the same key.
func TestOtherRequestAfterAmbiguous503Is422(t *testing.T) {
	g, fs := startFaulty(t, "")
	first := jsonMap{"id": "reuse-first", "url": "http://receiver.test/first"}
	fs.set(faultAfter, "PutEndpoint")
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, first, "Idempotency-Key", "reuse-amb")
	want503(t, "endpoint write reported failed", st, hdr, b)
	fs.set(faultNone, "PutEndpoint")
	must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/reuse-first", acmeToken, nil)) // it was written

	other := jsonMap{"id": "reuse-other", "url": "http://receiver.test/other"}
	st, _, b = g.api("POST", "/endpoints", acmeToken, other, "Idempotency-Key", "reuse-amb")
	if st != 422 {
		t.Fatalf("another request with the key of a request that had its effect (answered 503): %d %s; want 422 idempotency-key-reused", st, b)
	}
}

// panicOnceStore is the real store whose PutEndpoint panics once (a bug in
// a handler, recovered by the server as a 500).
type panicOnceStore struct {
	storage.Store
	armed atomic.Bool
}

func (s *panicOnceStore) PutEndpoint(ctx context.Context, ep *storage.Endpoint) error {
	if s.armed.CompareAndSwap(true, false) {
		panic("injected handler bug")
	}
	return s.Store.PutEndpoint(ctx, ep)
}

// A POST that ends in a 500 (here a recovered panic) is not stored as the
// key's answer, so the retry with the same key runs again at once, as it
// does after any other 5xx. Instead the key stays claimed as "still
// running" for the whole lease: the retry the 500 invites gets 409.
func TestRetryAfterPanic500Runs(t *testing.T) {
	var ps *panicOnceStore
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store {
		ps = &panicOnceStore{Store: s}
		return ps
	}})
	ps.armed.Store(true)
	body := jsonMap{"id": "reuse-panic", "url": "http://receiver.test/p"}
	st, _, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "reuse-panic")
	if st != 500 {
		t.Fatalf("first: %d %s; want the recovered 500", st, b)
	}
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "reuse-panic")
	if st != 201 {
		t.Fatalf("retry after a 500: %d Retry-After=%q %s; want 201 (a 5xx is not the key's answer, the retry runs)", st, hdr.Get("Retry-After"), b)
	}
}

// slowReadStore is the real store whose GetSource is slow once armed (a
// disk stall, a compaction), and whose FinishKey and AbandonKey honour
// their context the way a database/sql driver does: an expired context
// fails the call before it is sent.
type slowReadStore struct {
	storage.Store
	delay    atomic.Int64 // nanoseconds; 0 = not slow
	mu       sync.Mutex
	finished []error // ctx.Err() seen by each FinishKey
}

func (s *slowReadStore) GetSource(ctx context.Context, id string) (storage.Source, error) {
	if d := time.Duration(s.delay.Load()); d > 0 {
		time.Sleep(d) // the fault: a slow read, not synchronisation
	}
	return s.Store.GetSource(ctx, id)
}

func (s *slowReadStore) FinishKey(ctx context.Context, tenant, key string, lease time.Time, resp storage.Response, exp time.Time) error {
	s.mu.Lock()
	s.finished = append(s.finished, ctx.Err())
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.FinishKey(ctx, tenant, key, lease, resp, exp)
}

func (s *slowReadStore) AbandonKey(ctx context.Context, tenant, key string, lease time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.AbandonKey(ctx, tenant, key, lease)
}

// An admin POST under an Idempotency-Key that takes a little over 10s
// (a slow store read; idemLease allows 30s) must still store its answer:
// the retry gets it replayed and the request is not run again. The
// context of FinishKey was started before the handler ran, so it had
// already expired when the answer was stored: the answer was lost and the
// retry got 409 for the rest of the lease, then ran the request again.
func TestSlowIdempotentPostStillStoresItsAnswer(t *testing.T) {
	var ss *slowReadStore
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store {
		ss = &slowReadStore{Store: s}
		return ss
	}})
	body := jsonMap{"id": "slow-ep", "url": "http://receiver.test/slow", "sources": []string{"open"}}
	ss.delay.Store(int64(10*time.Second + 300*time.Millisecond))
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "slow-key"))
	ss.delay.Store(0)
	ss.mu.Lock()
	seen := append([]error(nil), ss.finished...)
	ss.mu.Unlock()
	if len(seen) != 1 || seen[0] != nil {
		t.Errorf("FinishKey contexts: %v; want one live context (the answer's write has its own 10s)", seen)
	}
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "slow-key")
	if st != 201 || hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("retry of a POST that took 10.3s: %d Idempotent-Replayed=%q Retry-After=%q %s; want 201 replayed",
			st, hdr.Get(inbound.HeaderReplayed), hdr.Get("Retry-After"), b)
	}
}

// slowFirstCreate is the real store with a short Idempotency-Key lease
// and a first PutEndpoint that waits for the test: a POST /endpoints that
// outlives its key's lease (a stalled disk, a catalog lock held long),
// whose retry takes the key over meanwhile, as SPEC section 5 lets it.
type slowFirstCreate struct {
	shortLease
	puts      atomic.Int32
	inPut     chan struct{} // closed when the first PutEndpoint waits
	gate      chan struct{} // the first PutEndpoint goes on once closed
	derived   atomic.Value  // string: the id the runs derive
	looked    chan struct{} // closed at the second lookup of the derived id
	lookups   atomic.Int32
	lookedOne sync.Once
}

// shortLease is the real store with Idempotency-Key leases of its own
// length, for tests of a retry that takes over a slow first run.
type shortLease struct {
	storage.Store
	lease time.Duration
}

func (s *shortLease) ClaimKey(ctx context.Context, c storage.IdemClaim) (storage.IdemResult, error) {
	c.LeaseUntil = c.Now.Add(s.lease)
	return s.Store.ClaimKey(ctx, c)
}

func (s *slowFirstCreate) PutEndpoint(ctx context.Context, ep *storage.Endpoint) error {
	if s.puts.Add(1) == 1 {
		s.derived.Store(ep.ID)
		close(s.inPut)
		<-s.gate
	}
	return s.Store.PutEndpoint(ctx, ep)
}

func (s *slowFirstCreate) GetEndpoint(ctx context.Context, id string) (storage.Endpoint, error) {
	if d, _ := s.derived.Load().(string); d != "" && id == d && s.lookups.Add(1) == 1 {
		// The retry's look for what its first run made, before that run
		// has written it.
		s.lookedOne.Do(func() { close(s.looked) })
	}
	return s.Store.GetEndpoint(ctx, id)
}

// TestCreateEndpointRetryTakingOverASlowFirstRunGetsTheEndpoint: a POST
// /endpoints without an id, under an Idempotency-Key, derives its id from
// the key's use, so that a run again finds what the first run made. When
// the first run outlives its lease and the retry takes the key over, the
// retry may look before the first run writes the endpoint: it looks again
// under the catalog lock, and answers 201 with that endpoint. (It answered
// 409 "an endpoint with this id already exists", stored as the key's
// answer for dedupe.ttl, about an id the operator never named.)
func TestCreateEndpointRetryTakingOverASlowFirstRunGetsTheEndpoint(t *testing.T) {
	st := &slowFirstCreate{shortLease: shortLease{lease: 300 * time.Millisecond}, inPut: make(chan struct{}), gate: make(chan struct{}), looked: make(chan struct{})}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { st.Store = s; return st }})
	var once sync.Once
	release := func() { once.Do(func() { close(st.gate) }) }
	t.Cleanup(release)

	body := `{"url":"http://receiver.test/slow"}`
	post := func() (int, []byte) {
		req, _ := http.NewRequest("POST", "http://"+g.AdminAddr()+"/api/v1/endpoints", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+acmeToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "slow-create")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	type answer struct {
		st int
		b  []byte
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() { s, b := post(); first <- answer{s, b} }()
	select {
	case <-st.inPut:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run never reached its write")
	}
	// The first run's lease ends while it waits in its write.
	leaseEnd := time.Now().Add(st.lease + 50*time.Millisecond)
	testsupport.WaitFor(t, 5*time.Second, "the first run's lease to end", func() bool { return time.Now().After(leaseEnd) })
	go func() { s, b := post(); second <- answer{s, b} }()
	select {
	case <-st.looked:
	case <-time.After(10 * time.Second):
		release()
		t.Fatal("the retry never looked for the derived id")
	}
	release()
	a1, a2 := <-first, <-second
	if a1.st != http.StatusCreated {
		t.Fatalf("first run: %d %s", a1.st, a1.b)
	}
	var made admin.Endpoint
	if err := json.Unmarshal(a1.b, &made); err != nil {
		t.Fatal(err)
	}
	// A later retry gets the key's stored answer.
	st3, b3 := post()
	for _, a := range []answer{a2, {st3, b3}} {
		var got admin.Endpoint
		if a.st != http.StatusCreated || json.Unmarshal(a.b, &got) != nil || got.ID != made.ID {
			t.Errorf("retry of the create that made %s: %d %s; want 201 with that endpoint", made.ID, a.st, bytes.TrimSpace(a.b))
		}
	}
}

// slowFirstReplay is the real store with a short Idempotency-Key lease
// and a first CreateReplay that waits for the test: a POST /replays that
// outlives its key's lease, whose retry takes the key over meanwhile.
type slowFirstReplay struct {
	shortLease
	puts    atomic.Int32
	jobID   atomic.Value // string
	inPut   chan struct{}
	gate    chan struct{}
	secondW chan struct{} // closed once the retry's CreateReplay is written
}

func (s *slowFirstReplay) CreateReplay(ctx context.Context, j *storage.ReplayJob) error {
	switch s.puts.Add(1) {
	case 1:
		s.jobID.Store(j.ID)
		close(s.inPut)
		<-s.gate
	case 2:
		err := s.Store.CreateReplay(ctx, j)
		close(s.secondW)
		return err
	}
	return s.Store.CreateReplay(ctx, j)
}

// TestBulkReplayRetryTakingOverASlowFirstRunReplaysOnce: a POST /replays
// under an Idempotency-Key derives its job id from the key's use, so that
// a run again finds the first run's job instead of replaying every event a
// second time. When the first run outlives its lease (its job write slow)
// and the retry takes the key over, both may look for the job before
// either writes it: the job is created once (Store.CreateReplay), and the
// later writer answers with the job the other made. (Both wrote it; the
// first run's write landed over the retry's finished job, and the job ran
// again from the start: every matched event delivered once more.)
func TestBulkReplayRetryTakingOverASlowFirstRunReplaysOnce(t *testing.T) {
	rcv := newReceiver(t)
	st := &slowFirstReplay{shortLease: shortLease{lease: 300 * time.Millisecond}, inPut: make(chan struct{}), gate: make(chan struct{}), secondW: make(chan struct{})}
	g := startGateway(t, gwOptions{
		extra:     fmt.Sprintf("endpoints:\n  - {id: r1, tenant: acme, url: %q, sources: [open]}\n", rcv.url("r1")),
		wrapStore: func(s storage.Store) storage.Store { st.Store = s; return st },
	})
	var once sync.Once
	release := func() { once.Do(func() { close(st.gate) }) }
	t.Cleanup(release)

	if s, _, b := g.post("open", []byte(`{"id":"rp-1","type":"t"}`), nil); s != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", s, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "the first delivery", func() bool { return rcv.count() == 1 })

	post := func() (int, string) {
		req, _ := http.NewRequest("POST", "http://"+g.AdminAddr()+"/api/v1/replays", strings.NewReader(`{"source":"open"}`))
		req.Header.Set("Authorization", "Bearer "+acmeToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "slow-replay")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	first := make(chan string, 1)
	go func() { s, b := post(); first <- fmt.Sprint(s, " ", b) }()
	select {
	case <-st.inPut:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run never reached its job write")
	}
	leaseEnd := time.Now().Add(st.lease + 50*time.Millisecond)
	testsupport.WaitFor(t, 5*time.Second, "the first run's lease to end", func() bool { return time.Now().After(leaseEnd) })
	if s, b := post(); s != http.StatusAccepted {
		t.Fatalf("retry after the lease: %d %s", s, b)
	}
	<-st.secondW
	id := st.jobID.Load().(string)
	done := func() bool {
		j, err := g.Store().GetReplay(context.Background(), id)
		return err == nil && j.State != storage.ReplayRunning
	}
	testsupport.WaitFor(t, 10*time.Second, "the retry's job to finish", done)
	testsupport.WaitFor(t, 10*time.Second, "the replayed delivery", func() bool { return rcv.count() == 2 })
	release()
	t.Logf("first run answered %s", <-first)
	testsupport.WaitFor(t, 10*time.Second, "the job to finish", done)
	// The job is done: every delivery it made is in the store.
	evs := eventsIn(t, g.Store())
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	if ds := deliveriesOf(t, g.Store(), evs[0].ID); len(ds) != 2 {
		t.Fatalf("the event has %d deliveries: the ingest's and one per run of the bulk replay; want 2 (one replay job, run once)", len(ds))
	}
}

// TestAdminIdempotencyKeyFreeAfterUnroutedPost: a POST under an
// Idempotency-Key that no handler ran (a path the API does not have)
// stores nothing, so the key is still free. SPEC section 5: "the first
// request with a key is executed; its status and body are stored"; the
// 422 is for a key whose (executed) request differs. A typo'd path must
// not burn the key for dedupe.ttl.
func TestAdminIdempotencyKeyFreeAfterUnroutedPost(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"url":"http://receiver.test/a"}`
	st, _, b := g.api("POST", "/endpoint", acmeToken, body, "Idempotency-Key", "unrouted-typo")
	if st != 404 {
		t.Fatalf("POST to an unknown route: %d %s, want 404", st, b)
	}
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "unrouted-typo")
	if st != 201 {
		t.Errorf("POST /endpoints under a key whose only earlier use ran no handler (404): %d %s (Idempotent-Replayed=%q); want 201 (the key was never used by an executed request)",
			st, strings.TrimSpace(string(b)), hdr.Get(inbound.HeaderReplayed))
	}

	// The same with a 405: POST to a route that takes no POST, then the
	// POST meant (rotate-secret) under the same key.
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, `{"id":"unrouted-ep","url":"http://receiver.test/b"}`))
	if st, _, b := g.api("POST", "/endpoints/unrouted-ep", acmeToken, `{}`, "Idempotency-Key", "unrouted-405"); st != 405 {
		t.Fatalf("POST /endpoints/{id}: %d %s, want 405", st, b)
	}
	st, hdr, b = g.api("POST", "/endpoints/unrouted-ep/rotate-secret", acmeToken, `{}`, "Idempotency-Key", "unrouted-405")
	if st != 200 {
		t.Errorf("POST rotate-secret under a key whose only earlier use ran no handler (405): %d %s (Idempotent-Replayed=%q); want 200",
			st, strings.TrimSpace(string(b)), hdr.Get(inbound.HeaderReplayed))
	}
}

// lostAnswers is the real store as a process that dies between an
// idempotent POST's write and the write of its answer leaves it: the
// answer is never stored, and the key's claim holds until its lease ends,
// after which SPEC section 5 runs the retry again. Leases are short here,
// so that the retry comes soon.
type lostAnswers struct {
	storage.Store
	lease time.Duration
}

func (s *lostAnswers) ClaimKey(ctx context.Context, c storage.IdemClaim) (storage.IdemResult, error) {
	c.LeaseUntil = c.Now.Add(s.lease)
	return s.Store.ClaimKey(ctx, c)
}

func (s *lostAnswers) FinishKey(context.Context, string, string, time.Time, storage.Response, time.Time) error {
	return errors.New("the process died before the answer was stored")
}

// postUntil sends a POST under key until ready says its answer is the one
// waited for, and returns that answer, which must have status want.
func postUntil[T any](t *testing.T, g *gw, path string, body any, key string, want int, what string,
	ready func(st int, hdr http.Header) bool) T {
	t.Helper()
	var got T
	testsupport.WaitFor(t, 15*time.Second, what, func() bool {
		st, hdr, b := g.api("POST", path, acmeToken, body, "Idempotency-Key", key)
		if !ready(st, hdr) {
			return false
		}
		if st != want {
			t.Fatalf("%s: %d %s", what, st, b)
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		return true
	})
	return got
}

// rerun sends a POST under key until it runs again (the first run's claim
// has ended: no more 409).
func rerun[T any](t *testing.T, g *gw, path string, body any, key string, want int) T {
	t.Helper()
	return postUntil[T](t, g, path, body, key, want, "the lost answer's claim to end and the retry to run",
		func(st int, _ http.Header) bool { return st != 409 })
}

// A POST /endpoints without an id, run again after its answer was lost,
// answers with the endpoint its first run made, secret included, instead
// of making a second endpoint (which would get every event again).
func TestCreateEndpointRunAgainAfterLostAnswer(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store {
		return &lostAnswers{Store: s, lease: time.Second}
	}})
	before := countEndpoints(t, g)
	body := jsonMap{"url": "http://receiver.test/lost"}
	first := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "lost-1"))
	again := rerun[admin.Endpoint](t, g, "/endpoints", body, "lost-1", 201)
	if again.ID != first.ID || again.Secret != first.Secret || again.URL != first.URL {
		t.Fatalf("run again: %+v, first run: %+v", again, first)
	}
	if n := countEndpoints(t, g); n != before+1 {
		t.Fatalf("%d endpoints, want %d", n, before+1)
	}

	// Another key is another request: another endpoint.
	other := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "lost-2"))
	if other.ID == first.ID {
		t.Fatalf("two keys made one id %s", other.ID)
	}
	// Without a key every POST makes a new endpoint.
	plain1 := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, body))
	plain2 := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, body))
	if plain1.ID == plain2.ID || plain1.Secret == plain2.Secret {
		t.Fatalf("two POSTs without a key: %s and %s", plain1.ID, plain2.ID)
	}
	// An id the request names is the request's: taken, it stays a 409.
	named := jsonMap{"id": "named-lost", "url": "http://receiver.test/lost"}
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, named, "Idempotency-Key", "lost-3"))
	wantProblem(t, "named id taken", 409, "id")(g.api("POST", "/endpoints", acmeToken, named, "Idempotency-Key", "lost-4"))
}

// A bulk replay run again after its answer was lost answers with the job
// its first run started, and starts no second one: every matched event
// goes out once more, not twice.
func TestCreateReplayRunAgainAfterLostAnswer(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store {
		return &lostAnswers{Store: s, lease: time.Second}
	}})
	body := jsonMap{"source": "open"}
	first := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, body, "Idempotency-Key", "lost-replay"))
	again := rerun[admin.Replay](t, g, "/replays", body, "lost-replay", 202)
	if again.ID != first.ID {
		t.Fatalf("run again started job %s; the first run's is %s", again.ID, first.ID)
	}
	other := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, body, "Idempotency-Key", "another"))
	if other.ID == first.ID {
		t.Fatalf("two keys, one job %s", other.ID)
	}
}

// A create whose write was stored but reported failed (a timeout after
// the write: the answer is a 503, and the key is given up so that a retry
// runs again) is found by that retry, not made a second time; a bulk
// replay found that way is run.
func TestCreateRunAgainAfterAnAmbiguousWriteFindsIt(t *testing.T) {
	rcv := newReceiver(t)
	g, fs := startFaulty(t, endpointA(rcv))
	before := countEndpoints(t, g)
	// It subscribes to no event of this test: the replay below is to "a".
	body := jsonMap{"url": "http://receiver.test/ambiguous", "event_types": []string{"none.*"}}
	fs.set(faultAfter, "PutEndpoint")
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "amb-ep")
	want503(t, "endpoint write reported failed", st, hdr, b)
	fs.set(faultNone, "PutEndpoint")
	again := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "amb-ep"))
	if n := countEndpoints(t, g); n != before+1 || again.URL != "http://receiver.test/ambiguous" {
		t.Fatalf("%d endpoints (want %d), answer %+v", n, before+1, again)
	}

	ingestN(t, g, "amb", 2)
	testsupport.WaitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 2 })
	fs.set(faultAfter, "CreateReplay")
	st, hdr, b = g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}, "Idempotency-Key", "amb-rpl")
	want503(t, "replay job write reported failed", st, hdr, b)
	fs.set(faultNone, "CreateReplay")
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}, "Idempotency-Key", "amb-rpl"))
	if job = waitReplay(t, g, acmeToken, job.ID); job.State != "completed" || job.Enqueued != 2 {
		t.Fatalf("job: %+v", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "the replayed deliveries", func() bool { return rcv.count() == 4 })
	ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Limit: 100})
	if err != nil || len(ds) != 4 {
		t.Fatalf("%d deliveries, %v; want 4 (2 events, replayed once)", len(ds), err)
	}
}

// An endpoint whose create was written but reported failed (503; the key
// is given up) and that the retry then finds by its derived id must also
// get deliveries: the retry answers 201 with it, so the operator takes it
// as made, but the first run's 503 returned before the registry was
// reloaded, and the retry's "found it" answer did not reload it either:
// until some other catalog change or a restart, ingest made no delivery
// for the endpoint the operator was told exists.
func TestCreateEndpointFoundAfterAmbiguousWriteGetsDeliveries(t *testing.T) {
	rcv := newReceiver(t)
	g, fs := startFaulty(t, endpointA(rcv))
	body := jsonMap{"url": rcv.url("found")}
	fs.set(faultAfter, "PutEndpoint")
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "amb-found")
	want503(t, "endpoint write reported failed", st, hdr, b)
	fs.set(faultNone, "PutEndpoint")
	ep := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "amb-found"))
	if ep.URL != rcv.url("found") {
		t.Fatalf("retry answered %+v", ep)
	}
	ingestN(t, g, "after-found", 1)
	testsupport.WaitFor(t, 10*time.Second, "the event at endpoint a", func() bool { return rcv.byPath()["/a"] == 1 })
	testsupport.WaitFor(t, 5*time.Second, "a delivery to endpoint "+ep.ID+" (answered 201) of an event ingested after",
		func() bool { return rcv.byPath()["/found"] > 0 })
}

// A POST /endpoints or /sources that names its id, run again after its
// answer was lost, answers 201 with what its first run made: the id is
// taken, by this very request. It stayed a 409 "already exists", stored as
// the key's answer for dedupe.ttl, for a create that had succeeded.
// Another key naming the same id is another request: 409.
func TestCreateNamedRunAgainAfterLostAnswer(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store {
		return &lostAnswers{Store: s, lease: time.Second}
	}})
	ep := jsonMap{"id": "named-ep", "url": "http://receiver.test/named"}
	first := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, ep, "Idempotency-Key", "named-1"))
	again := rerun[admin.Endpoint](t, g, "/endpoints", ep, "named-1", 201)
	if again.ID != "named-ep" || again.Secret != first.Secret {
		t.Fatalf("run again: %+v, first run: %+v", again, first)
	}
	wantProblem(t, "the id under another key", 409, "id")(g.api("POST", "/endpoints", acmeToken, ep, "Idempotency-Key", "named-2"))

	src := jsonMap{"id": "named-src", "verify": jsonMap{"scheme": "none"}}
	must[admin.Source](t, 201)(g.api("POST", "/sources", acmeToken, src, "Idempotency-Key", "named-3"))
	if again := rerun[admin.Source](t, g, "/sources", src, "named-3", 201); again.ID != "named-src" {
		t.Fatalf("run again: %+v", again)
	}
	wantProblem(t, "the source id under another key", 409, "id")(g.api("POST", "/sources", acmeToken, src, "Idempotency-Key", "named-4"))
}

// POST /events/{id}/replay run again after its answer was lost answers
// with the deliveries its first run made and sends the event once more,
// not twice; and POST /deliveries/{id}/retry run again does not send the
// delivery a third time.
func TestReplayAndRetryRunAgainAfterLostAnswer(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store {
		return &lostAnswers{Store: s, lease: time.Second}
	})
	id := ingestN(t, g, "lost-replay", 1)[0]
	testsupport.WaitFor(t, 10*time.Second, "the first delivery", func() bool { return rcv.count() == 1 })

	path := "/events/" + id + "/replay"
	first := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", path, acmeToken, jsonMap{}, "Idempotency-Key", "lost-r"))
	testsupport.WaitFor(t, 10*time.Second, "the replay", func() bool { return rcv.count() == 2 })
	again := rerun[admin.List[admin.Delivery]](t, g, path, jsonMap{}, "lost-r", 202)
	if len(first.Data) != 1 || len(again.Data) != 1 || again.Data[0].ID != first.Data[0].ID {
		t.Fatalf("run again answered %+v; the first run made %+v", again.Data, first.Data)
	}

	retry := "/deliveries/" + first.Data[0].ID + "/retry"
	testsupport.WaitFor(t, 10*time.Second, "the replay's outcome", func() bool {
		return g.dpDelivery(first.Data[0].ID).State == "succeeded"
	})
	must[admin.Delivery](t, 202)(g.api("POST", retry, acmeToken, nil, "Idempotency-Key", "lost-t"))
	testsupport.WaitFor(t, 10*time.Second, "the retry's outcome", func() bool {
		d := g.dpDelivery(first.Data[0].ID)
		return d.State == "succeeded" && d.AttemptCount == 2
	})
	rerun[admin.Delivery](t, g, retry, nil, "lost-t", 202)

	// A later replay under another key is sent. Once it is delivered, the
	// receiver has had 4 requests if neither run again sent anything.
	later := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", path, acmeToken, jsonMap{}, "Idempotency-Key", "lost-r2"))
	testsupport.WaitFor(t, 10*time.Second, "the second replay", func() bool {
		return len(later.Data) == 1 && g.dpDelivery(later.Data[0].ID).State == "succeeded"
	})
	ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Event: id, Limit: 10})
	if err != nil || len(ds) != 3 {
		t.Fatalf("%d deliveries of the event, %v; want 3 (the first, two replays)", len(ds), err)
	}
	if n := rcv.count(); n != 4 {
		t.Fatalf("receiver got %d requests, want 4 (first, replay, retry, second replay)", n)
	}
	if d := g.dpDelivery(first.Data[0].ID); d.AttemptCount != 2 {
		t.Fatalf("the replay's delivery made %d attempts, want 2 (its own and the retry's)", d.AttemptCount)
	}
}

// failFirstEnqueue fails the first replay write, storing nothing: the
// admin API answers 503 and gives the Idempotency-Key up (its use, and so
// its start time, is kept for the retry the 503 invites).
type failFirstEnqueue struct {
	storage.Store
	failed atomic.Bool
}

func (s *failFirstEnqueue) Enqueue(ctx context.Context, ds []storage.Delivery) error {
	if s.failed.CompareAndSwap(false, true) {
		return errors.New("disk briefly unwritable")
	}
	return s.Store.Enqueue(ctx, ds)
}

// keyedReplayAfter503 starts a gateway with endpoint ep (settings added to
// its config line) on rcv over a store whose first Enqueue fails, ingests
// one event, and sends its replay under Idempotency-Key ep+"-1": a 503
// that gives the key up, keeping its use for the retry. It returns the
// event ids and the replay's path.
func keyedReplayAfter503(t *testing.T, rcv *receiver, ep, settings string) (*gw, []string, string) {
	t.Helper()
	s := &failFirstEnqueue{}
	g := startGateway(t, gwOptions{
		wrapStore: func(st storage.Store) storage.Store { s.Store = st; return s },
		extra:     fmt.Sprintf("endpoints:\n  - {id: %s, tenant: acme, url: %q%s}\n", ep, rcv.url(ep), settings),
	})
	ids := ingestN(t, g, ep, 1)
	testsupport.WaitFor(t, 10*time.Second, "the original", func() bool { return rcv.countAt(ep) == 1 })
	path := "/events/" + ids[0] + "/replay"
	if st, _, b := g.api("POST", path, acmeToken, nil, "Idempotency-Key", ep+"-1"); st != 503 {
		t.Fatalf("first try: %d %s", st, b)
	}
	return g, ids, path
}

// An event replay under an Idempotency-Key, retried after a 503 (same
// key, as the 503 invites) once another replay of the event was made in
// between: its delivery is the newest, and lists say so. GET /events/{id}
// and GET /deliveries are "newest first", GET /deliveries?since= bounds
// created_at, and a bulk replay by status takes each endpoint's latest
// delivery of an event: all of them read the order of delivery ids.
func TestKeyedReplayRetriedAfter503IsTheNewestDelivery(t *testing.T) {
	rcv := newReceiver(t)
	g, ids, path := keyedReplayAfter503(t, rcv, "ko", "")
	// Another operator's replay meanwhile (no key).
	mid := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", path, acmeToken, nil)).Data[0]
	// Strictly later than mid, on the API's clock.
	testsupport.WaitFor(t, 5*time.Second, "the clock to pass mid's creation", func() bool {
		c, _ := time.Parse(time.RFC3339Nano, mid.CreatedAt)
		return time.Now().After(c.Add(2 * time.Millisecond))
	})
	keyed := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", path, acmeToken, nil, "Idempotency-Key", "ko-1")).Data[0]
	if keyed.CreatedAt <= mid.CreatedAt {
		t.Fatalf("keyed created_at %s not after mid's %s", keyed.CreatedAt, mid.CreatedAt)
	}
	ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+ids[0], acmeToken, nil))
	if len(*ev.Deliveries) != 3 || (*ev.Deliveries)[0].ID != keyed.ID {
		t.Errorf("GET /events/{id} newest first: %+v; the newest is %s (created %s)", *ev.Deliveries, keyed.ID, keyed.CreatedAt)
	}
	list := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+ids[0], acmeToken, nil))
	if len(list.Data) != 3 || list.Data[0].ID != keyed.ID {
		t.Errorf("GET /deliveries?event= newest first: first is %s (created %s), want %s (created %s)",
			list.Data[0].ID, list.Data[0].CreatedAt, keyed.ID, keyed.CreatedAt)
	}
	since := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?since="+url.QueryEscape(keyed.CreatedAt), acmeToken, nil))
	if len(since.Data) != 1 || since.Data[0].ID != keyed.ID {
		t.Errorf("GET /deliveries?since=%s lists %d deliveries, want the keyed replay's %s", keyed.CreatedAt, len(since.Data), keyed.ID)
	}
}

// The bulk-replay side of the same order: "status": "failed" takes each
// endpoint's latest delivery of an event. The keyed replay retried after a
// 503 succeeded after the other replay failed, so nothing of the event is
// failed any more and the job must match nothing.
func TestStatusReplayTakesTheKeyedReplayAsLatest(t *testing.T) {
	rcv := newReceiver(t)
	g, _, path := keyedReplayAfter503(t, rcv, "kl", ", retry: {max_attempts: 1}")
	rcv.failAt("kl", true)
	mid := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", path, acmeToken, nil)).Data[0]
	waitDeliveryState(t, g, mid.ID, "failed")
	rcv.failAt("kl", false)
	keyed := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", path, acmeToken, nil, "Idempotency-Key", "kl-1")).Data[0]
	waitDeliveryState(t, g, keyed.ID, "succeeded")
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"endpoint": "kl", "status": "failed"}))
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.Matched != 0 || job.Enqueued != 0 {
		t.Fatalf("replay of failed matched %d, enqueued %d: the event's latest delivery to kl (%s, created %s) succeeded; the failed one (%s, created %s) is older",
			job.Matched, job.Enqueued, keyed.ID, keyed.CreatedAt, mid.ID, mid.CreatedAt)
	}
}

// A keyed event replay whose answer was lost is run again. Meanwhile the
// event got admin.MaxPageLimit (1000) more deliveries (other replays): the run
// again still finds its first run's delivery, past the first page of the
// event's deliveries, and sends nothing more.
func TestKeyedReplayRunAgainFindsItsDeliveryPastAFullPage(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store {
		return &lostAnswers{Store: s, lease: time.Second}
	})
	id := ingestN(t, g, "pl", 1)[0]
	testsupport.WaitFor(t, 10*time.Second, "the first delivery", func() bool { return rcv.count() == 1 })
	path := "/events/" + id + "/replay"
	first := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", path, acmeToken, jsonMap{}, "Idempotency-Key", "pl-1"))
	if len(first.Data) != 1 {
		t.Fatalf("first run: %+v", first.Data)
	}
	ctx := context.Background()
	ev, err := g.Store().GetEvent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// 1000 later deliveries of the same event, to an endpoint id that is
	// not "a" (as other replays to other endpoints would make).
	base := time.Now()
	var more []storage.Delivery
	for i := range admin.MaxPageLimit {
		now := base.Add(time.Duration(i) * time.Microsecond)
		more = append(more, storage.Delivery{
			ID: storage.NewID("dlv_", now), Event: ev.ID, Tenant: ev.Tenant, Endpoint: "zz-other",
			IdempotencyKey: ev.IdempotencyKey, State: storage.StateCancelled,
			CreatedAt: now, NextAttemptAt: now, RetryFrom: now, UpdatedAt: now,
		})
	}
	for len(more) > 0 {
		n := min(100, len(more))
		if err := g.Store().Enqueue(ctx, more[:n]); err != nil {
			t.Fatal(err)
		}
		more = more[n:]
	}
	again := rerun[admin.List[admin.Delivery]](t, g, path, jsonMap{}, "pl-1", 202)
	if len(again.Data) != 1 || again.Data[0].ID != first.Data[0].ID {
		ds, _, _ := g.Store().ListDeliveries(ctx, storage.DeliveryFilter{Event: id, Endpoint: "a", Limit: 10})
		t.Fatalf("run again answered %s; the first run made %s; the event has %d deliveries to a (want 2: original + one replay)",
			again.Data[0].ID, first.Data[0].ID, len(ds))
	}
}
