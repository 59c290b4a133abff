package gateway

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

// failNthEnqueue fails one EnqueueReplay call (the failAt-th from now on,
// once).
type failNthEnqueue struct {
	storage.Store
	calls, failAt atomic.Int32
}

func (f *failNthEnqueue) EnqueueReplay(ctx context.Context, job *storage.ReplayJob, ds []storage.Delivery) error {
	if f.calls.Add(1) == f.failAt.Load() {
		return errInjected
	}
	return f.Store.EnqueueReplay(ctx, job, ds)
}

// partialFanout: 100 events (one replay batch) with no deliveries, then
// 21 endpoints, so one step enqueues 2100 deliveries: two writes
// (replayWriteMax 2000), 95 events in the first. The endpoints are
// rate-limited to one attempt, to keep the test quiet.
func partialFanout(t *testing.T) (*gw, *failNthEnqueue, []string) {
	fs := &failNthEnqueue{}
	g, eps := fanout(t, func(s storage.Store) storage.Store { fs.Store = s; return fs })
	return g, fs, eps
}

// fanout is partialFanout's gateway with its store wrapped by wrap.
func fanout(t *testing.T, wrap func(storage.Store) storage.Store) (*gw, []string) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{wrapStore: wrap})
	ingestN(t, g, "fan", replayBatch)
	var eps []string
	for i := range 21 {
		id := fmt.Sprintf("fan%02d", i)
		must[endpointView](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{
			"id": id, "tenant": "acme", "url": rcv.url(id), "rate_limit": 0.001}))
		eps = append(eps, id)
	}
	return g, eps
}

// wantReplayedOnce checks that job completed having enqueued each of the
// fan-out's 100 events once to each of its 21 endpoints.
func wantReplayedOnce(t *testing.T, g *gw, job replayView, eps []string) {
	t.Helper()
	total := 0
	for _, ep := range eps {
		ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Endpoint: ep, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		total += len(ds)
	}
	if job.State != "completed" || total != 2100 || job.Enqueued != 2100 {
		t.Fatalf("job %s matched=%d enqueued=%d; %d deliveries stored, want 2100 (100 events x 21 endpoints, replayed once)",
			job.State, job.Matched, job.Enqueued, total)
	}
}

// Found in review: a step whose second write failed was run again from
// the start, and the first write's 1995 deliveries, stored, were enqueued
// a second time. A retry now writes only what is left.
func TestReplayRetryWritesOnlyWhatIsLeft(t *testing.T) {
	g, fs, eps := partialFanout(t)
	fs.failAt.Store(fs.calls.Load() + 2) // the step's second write
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	wantReplayedOnce(t, g, waitReplay(t, g, acmeToken, job.ID), eps)
}

// Found in review: with a status filter the retry saw the first write's
// new (pending) deliveries as the latest, so those 95 events no longer
// matched, and the job did not count deliveries it had enqueued. A retry
// now keeps the targets chosen by the first try.
func TestReplayRetryKeepsTheTargetsItChose(t *testing.T) {
	g, fs, eps := partialFanout(t)
	ctx := context.Background()
	evs, _, err := g.Store().ListEvents(ctx, storage.EventFilter{Limit: replayBatch})
	if err != nil || len(evs) != replayBatch {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	now := time.Now().UTC()
	var failed []storage.Delivery
	for _, ev := range evs {
		for _, ep := range eps {
			failed = append(failed, storage.Delivery{ID: storage.NewID("dlv_", now), Event: ev.ID, Tenant: "acme", Endpoint: ep,
				State: storage.StateFailed, CreatedAt: now, RetryFrom: now, UpdatedAt: now})
		}
	}
	for len(failed) > 0 { // straight to the store, not through the fault
		n := min(len(failed), 1000)
		if err := fs.Store.Enqueue(ctx, failed[:n]); err != nil {
			t.Fatal(err)
		}
		failed = failed[n:]
	}
	time.Sleep(10 * time.Millisecond) // replays take events received before the job
	fs.failAt.Store(fs.calls.Load() + 2)
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"status": "failed"}))
	job = waitReplay(t, g, acmeToken, job.ID)
	pending := 0
	for _, ep := range eps {
		ds, _, err := g.Store().ListDeliveries(ctx, storage.DeliveryFilter{Endpoint: ep, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.State != storage.StateFailed {
				pending++
			}
		}
	}
	if job.State != "completed" || job.Matched != 100 || job.Enqueued != pending {
		t.Fatalf("job %s matched=%d enqueued=%d; the store has %d replayed deliveries of 100 events", job.State, job.Matched, job.Enqueued, pending)
	}
}

// failNthEventListing fails one ListDeliveries call with an event filter
// (the failAt-th from now on, once): a status-filtered replay reads each
// event's deliveries to choose its targets.
type failNthEventListing struct {
	storage.Store
	calls, failAt atomic.Int32
}

func (f *failNthEventListing) ListDeliveries(ctx context.Context, q storage.DeliveryFilter) ([]storage.Delivery, string, error) {
	if q.Event != "" && f.calls.Add(1) == f.failAt.Load() {
		return nil, "", errInjected
	}
	return f.Store.ListDeliveries(ctx, q)
}

// A step whose choice of targets fails halfway chooses again from scratch:
// the first try's half must not be counted (or written) twice.
func TestReplayRetryChoosesTargetsAgainFromScratch(t *testing.T) {
	rcv := newReceiver(t)
	fs := &failNthEventListing{}
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store { fs.Store = s; return fs })
	ingestN(t, g, "ct", 6)
	waitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 6 })
	fs.failAt.Store(fs.calls.Load() + 4) // the fourth event's
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open", "status": "succeeded"}))
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.State != "completed" || job.Matched != 6 || job.Enqueued != 6 {
		t.Fatalf("job: %+v; want 6 events matched and enqueued once", job)
	}
	waitFor(t, 10*time.Second, "the replayed deliveries", func() bool { return rcv.count() >= 12 })
	ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Limit: 100})
	if err != nil || len(ds) != 12 {
		t.Fatalf("%d deliveries, %v; want 12", len(ds), err)
	}
}

// blockEventListings holds every ListDeliveries call with an event filter
// (a status-filtered replay choosing its targets) until release is closed.
type blockEventListings struct {
	storage.Store
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockEventListings) ListDeliveries(ctx context.Context, q storage.DeliveryFilter) ([]storage.Delivery, string, error) {
	if q.Event != "" {
		b.once.Do(func() { close(b.entered) })
		<-b.release
	}
	return b.Store.ListDeliveries(ctx, q)
}

// A replay choosing its targets (reading every event's deliveries, with a
// status filter) does not hold the registry: an endpoint's delete, and so
// the ingests that would queue behind it, goes on meanwhile. The replay
// then writes nothing to the deleted endpoint.
func TestReplayChoosingTargetsDoesNotHoldUpADelete(t *testing.T) {
	rcv := newReceiver(t)
	bs := &blockEventListings{entered: make(chan struct{}), release: make(chan struct{})}
	g, job := replayChoosing(t, rcv, bs, "dl")
	deleted := make(chan int, 1)
	go func() {
		st, _, _ := g.api("DELETE", "/endpoints/b", opToken, nil)
		deleted <- st
	}()
	select {
	case st := <-deleted:
		if st != 204 {
			t.Fatalf("DELETE: %d", st)
		}
	case <-time.After(10 * time.Second):
		close(bs.release)
		t.Fatal("the delete waited for the replay's choice of targets")
	}
	close(bs.release)
	job = waitReplay(t, g, acmeToken, job.ID)
	ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Endpoint: "b", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.State != storage.StateSucceeded && d.State != storage.StateCancelled {
			t.Fatalf("the deleted endpoint got a replayed delivery: %+v (job %+v)", d, job)
		}
	}
}

// A status-filtered replay finds each endpoint's latest delivery of an
// event on any page of the event's deliveries: an event replayed to one
// endpoint a thousand times still has its failed delivery to another.
func TestReplayByStatusLooksPastTheFirstPageOfAnEvent(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: a, tenant: acme, url: %q}\n  - {id: b, tenant: acme, url: %q}\n",
		rcv.url("a"), rcv.url("b"))})
	ids := ingestN(t, g, "pg", 1)
	waitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 2 })
	ev, err := g.Store().GetEvent(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	delivery := func(ep string, st storage.DeliveryState, at time.Time) storage.Delivery {
		return storage.Delivery{ID: storage.NewID("dlv_", at), Event: ev.ID, Tenant: ev.Tenant, Endpoint: ep,
			IdempotencyKey: ev.IdempotencyKey, State: st, CreatedAt: at, NextAttemptAt: at, RetryFrom: at, UpdatedAt: at}
	}
	ds := []storage.Delivery{delivery("b", storage.StateFailed, now)} // b's latest: failed
	for i := range maxPageLimit {                                     // then a page and more of a's
		ds = append(ds, delivery("a", storage.StateSucceeded, now.Add(time.Duration(i+1)*time.Millisecond)))
	}
	if err := g.Store().Enqueue(context.Background(), ds); err != nil {
		t.Fatal(err)
	}
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open", "status": "failed"}))
	if job = waitReplay(t, g, acmeToken, job.ID); job.State != "completed" || job.Matched != 1 || job.Enqueued != 1 {
		t.Fatalf("job: %+v; want the event replayed to b", job)
	}
	waitFor(t, 10*time.Second, "the replay to b", func() bool { return rcv.count() == 3 })
}
