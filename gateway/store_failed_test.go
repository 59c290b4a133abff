package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
	"hookgate/storage/badger"
)

// syncFailedStore is the real store once its sync has failed: Badger's
// engine then refuses every write and durable read with ErrSyncFailed
// ("store must be reopened") until the process restarts (db.go: a failed
// sync is fatal to the store, fail-stop). The wrapper only reproduces that
// state on command, with the error the real store returns.
type syncFailedStore struct {
	storage.Store
	dead atomic.Bool
}

func (s *syncFailedStore) err() error {
	if s.dead.Load() {
		return fmt.Errorf("%w: fdatasync 000001.mem: input/output error", badger.ErrSyncFailed)
	}
	return nil
}

func (s *syncFailedStore) Ingest(ctx context.Context, r *storage.IngestRequest) (storage.IngestResult, error) {
	if err := s.err(); err != nil {
		return storage.IngestResult{}, err
	}
	return s.Store.Ingest(ctx, r)
}

func (s *syncFailedStore) Ping(ctx context.Context) error {
	if err := s.err(); err != nil {
		return err
	}
	return s.Store.Ping(ctx)
}

func (s *syncFailedStore) Claim(ctx context.Context, ep string, now time.Time, limit int, lease time.Duration) ([]storage.Job, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.Store.Claim(ctx, ep, now, limit, lease)
}

func (s *syncFailedStore) Complete(ctx context.Context, out *storage.Outcome) error {
	if err := s.err(); err != nil {
		return err
	}
	return s.Store.Complete(ctx, out)
}

// A store whose sync failed refuses every write until it is opened again:
// only a restart brings ingest back, so the gateway stops (Run returns the
// error, the binary exits 1, and its supervisor starts it again). It
// stayed up: /healthz answered 200 for ever while every ingest was 503,
// and /readyz's 503 looked like a full disk, which clears by itself.
func TestAStoreThatFailedForGoodStopsTheGateway(t *testing.T) {
	for _, c := range []struct {
		name  string
		after func(g *gw)
	}{
		{"found by an ingest", func(g *gw) {
			wantProblem(t, "ingest after the failed sync", 503, "")(g.post("open", []byte(`{"id":"after","type":"a"}`), nil))
		}},
		{"found while idle", func(*gw) {}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := storeCheckEvery
			t.Cleanup(func() { storeCheckEvery = d }) // after the gateway's: registered before it
			storeCheckEvery = 20 * time.Millisecond
			st := &syncFailedStore{}
			g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { st.Store = s; return st }})
			must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"before","type":"a"}`), nil))
			st.dead.Store(true)
			c.after(g)
			select {
			case err := <-g.Errors():
				if !errors.Is(err, storage.ErrStoreFailed) {
					t.Fatalf("the gateway stopped with %v, want the store's failure", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("10 s after the store failed for good the gateway still runs; only a restart brings ingest back")
			}
		})
	}
}
