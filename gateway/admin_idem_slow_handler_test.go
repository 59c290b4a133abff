package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

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
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "slow-key"))
	ss.delay.Store(0)
	ss.mu.Lock()
	seen := append([]error(nil), ss.finished...)
	ss.mu.Unlock()
	if len(seen) != 1 || seen[0] != nil {
		t.Errorf("FinishKey contexts: %v; want one live context (the answer's write has its own 10s)", seen)
	}
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "slow-key")
	if st != 201 || hdr.Get(headerReplayed) != "true" {
		t.Fatalf("retry of a POST that took 10.3s: %d Idempotent-Replayed=%q Retry-After=%q %s; want 201 replayed",
			st, hdr.Get(headerReplayed), hdr.Get("Retry-After"), b)
	}
}
