package gateway

import (
	"context"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

// purgeMidWrite stands for retention purging an event of a replay step
// between the step's listing and its write, while an endpoint's delete
// (reg.exclusive) arrives: on the first multi-event EnqueueReplay it
// really purges the oldest event (Purge), starts the delete, waits until
// the delete is queued on the registry, then writes (which finds the
// event gone: ErrNotFound).
type purgeMidWrite struct {
	storage.Store
	reg  *registry
	done atomic.Bool
}

func (p *purgeMidWrite) EnqueueReplay(ctx context.Context, job *storage.ReplayJob, ds []storage.Delivery) error {
	evs := map[string]bool{}
	for _, d := range ds {
		evs[d.Event] = true
	}
	if len(evs) > 1 && p.done.CompareAndSwap(false, true) {
		oldest := ""
		for e := range evs {
			if oldest == "" || e < oldest {
				oldest = e
			}
		}
		t, _ := storage.IDTime("evt_", oldest)
		if _, err := p.Store.Purge(ctx, t.Add(time.Millisecond), t.Add(time.Millisecond), 1); err != nil {
			return err
		}
		// An endpoint delete arrives now: it waits for this write.
		go func() { _ = p.reg.exclusive(func() error { return nil }) }()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
			if !p.reg.inUse.TryRLock() {
				break // the delete is queued: new readers wait behind it
			}
			p.reg.inUse.RUnlock()
		}
	}
	return p.Store.EnqueueReplay(ctx, job, ds)
}

// A replay step whose write finds an event purged since it was listed
// writes its events again one by one, with the registry still held once.
// It took the registry's read lock again for each: with an endpoint's
// delete (the write lock) queued in between, the second read lock waited
// for the delete and the delete for the first, and the replay, the delete
// and every ingest after them hung.
func TestReplayPurgedEventWithDeleteQueuedDoesNotWedge(t *testing.T) {
	g := startGateway(t, gwOptions{})
	ingestN(t, g, "pg", 3) // no endpoint yet: no deliveries, purgeable
	must[endpointView](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{
		"id": "x", "tenant": "acme", "url": "http://127.0.0.1:9/x", "rate_limit": 0.001}))

	// A runner of its own, over the gateway's store and a registry of its
	// own, so that a wedge does not hang the gateway's shutdown.
	log := slog.New(slog.DiscardHandler)
	reg := newRegistry(g.Store(), log)
	if _, err := reg.reload(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	st := &purgeMidWrite{Store: g.Store(), reg: reg}
	r := &replayRunner{store: st, reg: reg, log: log, notify: func(...string) {}, active: map[string]bool{}}
	now := time.Now().UTC().Add(time.Millisecond)
	job := storage.ReplayJob{ID: "rpl_purged", Tenant: "acme", State: storage.ReplayRunning, CreatedAt: now, UpdatedAt: now}
	if err := g.Store().PutReplay(context.Background(), &job); err != nil {
		t.Fatal(err)
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		r.run(context.Background(), job.ID)
	}()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("the replay step wedged: write re-took the registry's read lock it held, behind a queued endpoint delete")
	}
	got, err := g.Store().GetReplay(context.Background(), job.ID)
	if err != nil || got.State != storage.ReplayCompleted || got.Matched != 2 || got.Enqueued != 2 {
		t.Fatalf("job %+v, %v; want completed with the 2 events left matched and enqueued", got, err)
	}
}
