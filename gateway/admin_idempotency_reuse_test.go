package gateway

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

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

// The same after a process died mid-request: once the dead claim's lease
// is over, SPEC lets "the next retry" execute it; a different request
// with that key is still a different request: 422.
func TestOtherRequestAfterDeadClaimIs422(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := []byte(`{"id":"reuse-dead","url":"http://receiver.test/d"}`)
	now := time.Now().UTC()
	res, err := g.Store().ClaimKey(context.Background(), storage.IdemClaim{
		Tenant: "acme", Key: "reuse-dead", RequestHash: requestHash("POST", "/api/v1/endpoints", body),
		Now: now, LeaseUntil: now.Add(500 * time.Millisecond), Remember: now.Add(72 * time.Hour),
	})
	if err != nil || res.State != storage.IdemNew {
		t.Fatalf("claim: %+v %v", res, err)
	}
	// Within the lease another request is refused (422); after it, too.
	waitFor(t, 10*time.Second, "the dead claim's lease to end", func() bool { return time.Now().After(res.LeaseUntil.Add(10 * time.Millisecond)) })
	other := jsonMap{"id": "reuse-dead-other", "url": "http://receiver.test/o"}
	st, _, b := g.api("POST", "/endpoints", acmeToken, other, "Idempotency-Key", "reuse-dead")
	if st != 422 {
		t.Fatalf("another request with the key of a request that died mid-run: %d %s; want 422", st, b)
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
