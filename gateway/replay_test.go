package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/internal/testsupport"
	"hookgate/storage"

	bdg "github.com/dgraph-io/badger/v4"
)

// TestReplayResumesAfterRestart: a bulk replay that was running when the
// process stopped continues from its cursor at the next start; finished
// jobs are left alone.
func TestReplayResumesAfterRestart(t *testing.T) {
	rcv := newReceiver(t)
	extra := fmt.Sprintf("endpoints:\n  - {id: a, tenant: acme, url: %q}\n", rcv.url("a"))
	g := startGateway(t, gwOptions{extra: extra})
	ingestN(t, g, "res", 5)
	testsupport.WaitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 5 })

	// The job had done the newest two events when the process died: its
	// cursor points after them. (Newest in the listing's order: IDs made
	// in the same millisecond are not in the order of ingest.)
	ctx := context.Background()
	_, cursor, err := g.Store().ListEvents(ctx, storage.EventFilter{Tenant: "acme", Limit: 2})
	if err != nil || cursor == "" {
		t.Fatalf("cursor: %q %v", cursor, err)
	}
	all, _, err := g.Store().ListEvents(ctx, storage.EventFilter{Tenant: "acme"})
	if err != nil || len(all) != 5 {
		t.Fatalf("events: %d %v", len(all), err)
	}
	var ids []string // oldest first
	for i := len(all) - 1; i >= 0; i-- {
		ids = append(ids, all[i].ID)
	}
	now := time.Now().UTC()
	running := storage.ReplayJob{ID: storage.NewID("rpl_", now), Tenant: "acme", Source: "open", State: storage.ReplayRunning,
		Matched: 2, Enqueued: 2, Cursor: cursor, CreatedAt: now, UpdatedAt: now}
	done := storage.ReplayJob{ID: storage.NewID("rpl_", now), Tenant: "acme", Source: "open", State: storage.ReplayCompleted,
		CreatedAt: now, UpdatedAt: now}
	g = g.restart(gwOptions{extra: extra, wrapStore: func(s storage.Store) storage.Store {
		for _, j := range []*storage.ReplayJob{&running, &done} {
			if err := s.PutReplay(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}})

	job := waitReplay(t, g, acmeToken, running.ID)
	if job.State != "completed" || job.Matched != 5 || job.Enqueued != 5 {
		t.Fatalf("resumed job %+v, want 3 more events replayed", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "the resumed replay's deliveries", func() bool { return rcv.count() == 8 })
	for _, id := range ids[:3] { // the oldest three, which the cursor had not reached
		if n := len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+id, acmeToken, nil)).Data); n != 2 {
			t.Fatalf("event %s has %d deliveries, want 2", id, n)
		}
	}
	for _, id := range ids[3:] {
		if n := len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+id, acmeToken, nil)).Data); n != 1 {
			t.Fatalf("event %s has %d deliveries, want 1 (done before the restart)", id, n)
		}
	}
	if j := must[admin.Replay](t, 200)(g.api("GET", "/replays/"+done.ID, acmeToken, nil)); j.State != "completed" || j.Enqueued != 0 {
		t.Fatalf("a completed job ran again: %+v", j)
	}
}

// TestReplayRunnerLifecycle: Stop is idempotent; a job submitted after
// Stop stays stored as running and the next start runs it.
func TestReplayRunnerLifecycle(t *testing.T) {
	g := startGateway(t, gwOptions{})
	r := g.bg.replays
	r.Stop()
	r.Stop()
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	stored, err := g.Store().GetReplay(context.Background(), job.ID)
	if err != nil || stored.State != storage.ReplayRunning {
		t.Fatalf("job after stop: %+v %v", stored, err)
	}
	g = g.restart(gwOptions{})
	if j := waitReplay(t, g, acmeToken, job.ID); j.State != "completed" {
		t.Fatalf("after restart: %+v", j)
	}
}

// endpointA is config for one endpoint "a" of tenant acme on rcv.
func endpointA(rcv *receiver) string {
	return fmt.Sprintf("endpoints:\n  - {id: a, tenant: acme, url: %q}\n", rcv.url("a"))
}

// startWrapped starts a gateway with endpoint "a" on rcv over a store that
// wrap wraps (wrap returns the wrapper after keeping the real store).
func startWrapped(t *testing.T, rcv *receiver, wrap func(storage.Store) storage.Store) *gw {
	t.Helper()
	return startGateway(t, gwOptions{extra: endpointA(rcv), wrapStore: wrap})
}

// replayChoosing starts a gateway with endpoints "a" (config) and "b"
// (admin API) on rcv, ingests 3 events and, once they are delivered,
// a bulk replay by status whose choice of targets is held in bs until
// bs.release is closed. It returns when the replay is choosing.
func replayChoosing(t *testing.T, rcv *receiver, bs *blockEventListings, prefix string) (*gw, admin.Replay) {
	t.Helper()
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store { bs.Store = s; return bs })
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{"id": "b", "tenant": "acme", "url": rcv.url("b")}))
	ingestN(t, g, prefix, 3)
	testsupport.WaitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 6 })
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open", "status": "succeeded"}))
	<-bs.entered
	return g, job
}

// A bulk replay wrote the deliveries of a whole batch (100 events) in one
// store transaction ( in an earlier version). For a tenant with ~150 subscribed
// endpoints that is 15,000 deliveries, more than one Badger transaction
// holds: every such replay ended "failed" after enqueueing nothing.
func TestReplayToManyEndpoints(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // hold every attempt: the test needs the replay, not the sends
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	g := startGateway(t, gwOptions{})
	ingestN(t, g, "many", 100)
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for i := range 150 {
		fmt.Fprintf(&b, "  - {id: ep%03d, tenant: acme, url: %q, max_in_flight: 1}\n", i, srv.URL+"/")
	}
	g = g.restart(gwOptions{extra: b.String(), grace: 100 * time.Millisecond})
	t.Cleanup(func() { close(stop) })
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.State != "completed" || job.Enqueued != 100*150 {
		var cause string
		for _, l := range strings.Split(g.logs.String(), "\n") {
			if strings.Contains(l, "replay failed") {
				cause = l
			}
		}
		t.Fatalf("bulk replay of 100 events to 150 endpoints: state %s, matched %d, enqueued %d, error %q; log: %s",
			job.State, job.Matched, job.Enqueued, job.Error, cause)
	}
}

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
		must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{
			"id": id, "tenant": "acme", "url": rcv.url(id), "rate_limit": 0.001}))
		eps = append(eps, id)
	}
	return g, eps
}

// wantReplayedOnce checks that job completed having enqueued each of the
// fan-out's 100 events once to each of its 21 endpoints.
func wantReplayedOnce(t *testing.T, g *gw, job admin.Replay, eps []string) {
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
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
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
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"status": "failed"}))
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
	testsupport.WaitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 6 })
	fs.failAt.Store(fs.calls.Load() + 4) // the fourth event's
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open", "status": "succeeded"}))
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.State != "completed" || job.Matched != 6 || job.Enqueued != 6 {
		t.Fatalf("job: %+v; want 6 events matched and enqueued once", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "the replayed deliveries", func() bool { return rcv.count() >= 12 })
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
	testsupport.WaitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 2 })
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
	for i := range admin.MaxPageLimit {                               // then a page and more of a's
		ds = append(ds, delivery("a", storage.StateSucceeded, now.Add(time.Duration(i+1)*time.Millisecond)))
	}
	if err := g.Store().Enqueue(context.Background(), ds); err != nil {
		t.Fatal(err)
	}
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open", "status": "failed"}))
	if job = waitReplay(t, g, acmeToken, job.ID); job.State != "completed" || job.Matched != 1 || job.Enqueued != 1 {
		t.Fatalf("job: %+v; want the event replayed to b", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "the replay to b", func() bool { return rcv.count() == 3 })
}

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
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{
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

// An endpoint deleted and created again with the same id while a replay
// chooses its targets gets none of the deliveries chosen for the old one
// (here the new one is disabled, so no choice made now would pick it).
// Found reading the change that took the choice out of the registry's
// lock: the write checked only that the id still existed.
func TestReplayDoesNotWriteToAnEndpointRecreatedWhileChoosing(t *testing.T) {
	rcv := newReceiver(t)
	bs := &blockEventListings{entered: make(chan struct{}), release: make(chan struct{})}
	g, job := replayChoosing(t, rcv, bs, "rc")
	if st, _, b := g.api("DELETE", "/endpoints/b", opToken, nil); st != 204 {
		close(bs.release)
		t.Fatalf("DELETE: %d %s", st, b)
	}
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{
		"id": "b", "tenant": "acme", "url": rcv.url("b2"), "disabled": true}))
	close(bs.release)
	waitReplay(t, g, acmeToken, job.ID)

	ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Endpoint: "b", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.State != storage.StateSucceeded && d.State != storage.StateCancelled {
			t.Fatalf("the re-created (disabled) endpoint b got a replayed delivery chosen for the deleted one: %s %s", d.ID, d.State)
		}
	}
}

// stopDuringSecondEnqueue holds the second EnqueueReplay call from now on until
// its context ends, and then fails it with the context's error: what the
// real store's update does when the caller's context ends before its
// operation is queued (the writer's queue is full, or select picks the
// done context).
type stopDuringSecondEnqueue struct {
	storage.Store
	calls   atomic.Int32
	at      atomic.Int32
	entered chan struct{}
}

func (s *stopDuringSecondEnqueue) EnqueueReplay(ctx context.Context, job *storage.ReplayJob, ds []storage.Delivery) error {
	if s.calls.Add(1) == s.at.Load() {
		close(s.entered)
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.EnqueueReplay(ctx, job, ds)
}

// TestReplayStoppedBetweenTheWritesOfAStepDoesNotEnqueueTwice: a step of
// 100 events to 21 endpoints is two writes (replayWriteMax). A graceful
// shutdown (a deploy) between them must not leave the job's cursor before
// the batch whose first write is stored: the next start would enqueue those
// ~2,000 deliveries again, and every receiver get those events twice.
func TestReplayStoppedBetweenTheWritesOfAStepDoesNotEnqueueTwice(t *testing.T) {
	ws := &stopDuringSecondEnqueue{entered: make(chan struct{})}
	g, eps := fanout(t, func(s storage.Store) storage.Store { ws.Store = s; return ws })
	ws.at.Store(ws.calls.Load() + 2) // the step's second write
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	<-ws.entered
	g = g.restart(gwOptions{}) // Shutdown stops the runner: the held write fails with the context
	wantReplayedOnce(t, g, waitReplay(t, g, acmeToken, job.ID), eps)
}

// POST /deliveries/{id}/retry refuses a delivery older than its endpoint:
// after a tenant deleted endpoint "billing" and made a new one with the id
// (other URL, other event_types), retrying the old endpoint's failed
// delivery sent its event to the new endpoint, which never subscribed to
// it. A bulk replay with a status filter ("replay what failed", POST
// /replays {"status":"failed"}) did the same for every such delivery at
// once: its targets are the endpoints whose latest delivery of the event
// is in that state, and they were matched by id alone, so the old
// endpoint's failed deliveries made the new endpoint a target.
func TestStatusReplayDoesNotSendTheDeletedEndpointsFailuresToItsSuccessor(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/first" {
			w.WriteHeader(http.StatusInternalServerError) // the first endpoint fails every attempt
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	count := func(p string) int { mu.Lock(); defer mu.Unlock(); return hits[p] }

	g := startGateway(t, gwOptions{})
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{
		"id": "billing", "url": srv.URL + "/first", "event_types": []string{"invoice.*"},
		"retry": jsonMap{"max_attempts": 1},
	}))
	st, _, b := g.post("open", []byte(`{"id":"inv-1","type":"invoice.paid"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "the delivery to the first endpoint to fail", func() bool {
		ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+evt, acmeToken, nil)).Data
		return len(ds) == 1 && ds[0].State == "failed"
	})
	if st, _, b := g.api("DELETE", "/endpoints/billing", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	// The same tenant makes a new endpoint with the id, for other events.
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{
		"id": "billing", "url": srv.URL + "/second", "event_types": []string{"customer.*"},
	}))

	rpl := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"status": "failed"})).ID
	var job admin.Replay
	testsupport.WaitFor(t, 10*time.Second, "the bulk replay to finish", func() bool {
		job = must[admin.Replay](t, 200)(g.api("GET", "/replays/"+rpl, acmeToken, nil))
		return job.State != "running"
	})
	if job.Enqueued != 0 {
		testsupport.WaitFor(t, 10*time.Second, "the replayed delivery", func() bool { return count("/second") > 0 })
		t.Fatalf("a replay of what failed enqueued %d deliveries and sent invoice.paid to the new endpoint billing (event_types [customer.*]), which never subscribed to it: the failure was the deleted endpoint's", job.Enqueued)
	}
	if n := count("/second"); n != 0 {
		t.Fatalf("the new endpoint got %d requests", n)
	}
}

// damageEventRecord overwrites the stored record of event id (the store's
// key "ae:"+id) with bytes that do not decode, in the stopped gateway's
// data directory: the damage docs/guarantees.md deals with for
// claims and retention.
func damageEventRecord(t *testing.T, dir, id string) {
	t.Helper()
	db, err := bdg.Open(bdg.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *bdg.Txn) error {
		k := []byte("ae:" + id)
		if _, err := txn.Get(k); err != nil {
			return err // not the key the store uses: the test is wrong
		}
		return txn.Set(k, []byte{0xff, 0x00, 0x13})
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// A bulk replay over a range holding one unreadable event record replays
// the others. Its listing failed at that record: the job ended "failed"
// after a minute of retries, with none of the events replayed, and every
// new job over that range did the same until retention deleted the
// record, weeks later.
func TestBulkReplayGoesPastAnUnreadableEventRecord(t *testing.T) {
	defer func(d time.Duration) { replayRetryFor = d }(replayRetryFor)
	replayRetryFor = time.Second
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: endpointA(rcv)})
	ids := ingestN(t, g, "dmg", 3) // oldest first
	testsupport.WaitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 3 })
	dir := g.dir
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	damageEventRecord(t, dir, ids[1])
	g = startGateway(t, gwOptions{dir: dir, extra: endpointA(rcv)})

	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	var got admin.Replay
	testsupport.WaitFor(t, 30*time.Second, "the replay to end", func() bool {
		got = must[admin.Replay](t, 200)(g.api("GET", "/replays/"+job.ID, acmeToken, nil))
		return got.State != "running"
	})
	if got.State != "completed" || got.Matched != 2 || got.Enqueued != 2 {
		t.Fatalf("replay %+v; want completed, the 2 readable events replayed", got)
	}
}

// Bulk replay jobs (rp: records) were never deleted: not by retention, not
// by anything. Each POST /replays left a record for ever, and every start
// read all of them into memory (ListReplays loads every job, then keeps
// the running ones) to find those to resume. A tenant's nightly "replay
// what failed" (or a script that polls with POST /replays) grew the data
// directory and the start's memory without bound. Finished jobs now go
// with retention.
func TestFinishedReplayJobsArePurgedWithRetention(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gwOptions{config: func(c *config.Config) { c.Retention = config.Duration(time.Second) }})
	const jobs = 200
	for range jobs {
		must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open", "status": "failed"}))
	}
	testsupport.WaitFor(t, 20*time.Second, "every job to finish", func() bool {
		running, err := g.store.ListReplays(t.Context(), storage.ReplayRunning)
		return err == nil && len(running) == 0
	})
	// Let the jobs pass retention (1s), then sweep as the minute's loop does.
	finished := time.Now()
	testsupport.WaitFor(t, 5*time.Second, "retention to pass", func() bool { return time.Since(finished) > 1500*time.Millisecond })
	g.bg.purge(t.Context())
	all, err := g.store.ListReplays(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) > 0 {
		t.Errorf("%d finished replay jobs, all older than retention (1s), are still stored (of %d made); nothing ever deletes them", len(all), jobs)
	}
}
