package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

// afterTTL sends a POST under key until its stored answer has expired
// (dedupe.ttl) and the request is executed again (no Idempotent-Replayed).
func afterTTL[T any](t *testing.T, g *gw, path string, body any, key string, want int) T {
	t.Helper()
	return postUntil[T](t, g, path, body, key, want, "the key's stored answer to expire",
		func(_ int, hdr http.Header) bool { return hdr.Get(headerReplayed) != "true" })
}

// SPEC section 5: an answer is stored for dedupe.ttl; after that the key
// is free, and "the first request with a key is executed". A bulk replay
// sent again with its key once that window has passed (a nightly
// "replay what failed" job with a fixed key, as Stripe allows once a key
// is pruned) must replay again: not answer with the old, completed job
// (the derived id of a job is one use's, not the key's).
func TestBulkReplayKeyReusedAfterTTLRunsAgain(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{ttl: "1s", extra: fmt.Sprintf("endpoints:\n  - {id: r, tenant: acme, url: %q}\n", rcv.url("r"))})
	if st, _, b := g.post("open", []byte(`{"id":"ttl-ev","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	waitFor(t, 10*time.Second, "the first delivery", func() bool { return rcv.count() == 1 })

	body := jsonMap{"source": "open"}
	first := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, body, "Idempotency-Key", "nightly"))
	if job := waitReplay(t, g, acmeToken, first.ID); job.State != "completed" || job.Enqueued != 1 {
		t.Fatalf("first replay: %+v", job)
	}
	waitFor(t, 10*time.Second, "the first replay's delivery", func() bool { return rcv.count() == 2 })

	again := afterTTL[replayView](t, g, "/replays", body, "nightly", 202)
	if again.ID == first.ID {
		t.Fatalf("the request with a key whose answer expired (dedupe.ttl) was not executed: it answered 202 "+
			"with the old job %s (state %q, enqueued %d) and started no replay", again.ID, again.State, again.Enqueued)
	}
	waitReplay(t, g, acmeToken, again.ID)
	waitFor(t, 10*time.Second, "the second replay's delivery", func() bool { return rcv.count() == 3 })
}

// The same for POST /endpoints: once the key's answer has expired, the
// request is a new one and must create the endpoint it describes, not
// answer 201 with the endpoint made days earlier under the same key, as
// changed since (here another URL): the client would be told its endpoint
// to url A exists, and nothing would be delivered to A.
func TestCreateEndpointKeyReusedAfterTTLCreatesWhatItAsks(t *testing.T) {
	g := startGateway(t, gwOptions{ttl: "1s"})
	body := jsonMap{"url": "http://receiver.test/a"}
	first := must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "setup"))
	must[endpointView](t, 200)(g.api("PATCH", "/endpoints/"+first.ID, acmeToken, jsonMap{"url": "http://receiver.test/b"}))

	again := afterTTL[endpointView](t, g, "/endpoints", body, "setup", 201)
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
	first := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, body, "Idempotency-Key", "lost-r"))
	waitReplay(t, g, acmeToken, first.ID)
	must[endpointView](t, 200)(g.api("PATCH", "/endpoints/r", acmeToken, jsonMap{"disabled": true}))

	var st int
	var b []byte
	waitFor(t, 10*time.Second, "the lost answer's claim to end and the retry to run", func() bool {
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
	must[endpointView](t, 200)(g.api("GET", "/endpoints/reuse-first", acmeToken, nil)) // it was written

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
