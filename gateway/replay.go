package gateway

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"hookgate/gateway/admin"
	"hookgate/inbound"
	"hookgate/storage"
)

// replayBatch is how many events one step of a bulk replay reads: their
// deliveries are enqueued with the job's progress (counts and cursor) in
// the same write.
const replayBatch = 100

// replayWriteTimeout bounds the write that records a failed job, which a
// shutdown does not cut short.
const replayWriteTimeout = 10 * time.Second

// runnerState is where a replayRunner is in its life.
type runnerState int

const (
	runnerNew runnerState = iota
	runnerRunning
	runnerStopped
)

// replayRunner runs bulk replay jobs (POST /replays) in the background.
// A job is data: its filters, counts and cursor are in the store, written
// with the deliveries they account for, so a job cut short by a shutdown
// or a crash resumes exactly where it stopped at the next start, and
// enqueues each matching event's deliveries once.
type replayRunner struct {
	store  storage.Store
	reg    *registry
	notify func(endpoints ...string)
	log    *slog.Logger
	// lock takes a job's cluster lock: on a shared store a job runs on
	// one gateway at a time, and rescan > 0 makes every gateway look for
	// running jobs that no one runs (their gateway died) that often.
	lock   func(ctx context.Context, name string) (unlock func(), lost <-chan struct{}, ok bool, err error)
	rescan time.Duration

	mu     sync.Mutex
	state  runnerState
	ctx    context.Context
	cancel context.CancelFunc
	active map[string]bool // jobs with a goroutine
	wg     sync.WaitGroup
}

func newReplayRunner(g *Gateway) *replayRunner {
	r := &replayRunner{
		store: g.store, reg: g.reg, log: g.log.With("component", "replay"), active: map[string]bool{},
		notify: func(eps ...string) { g.disp.Notify(eps...) },
		lock:   g.tryLockCluster,
	}
	if _, shared := g.cluster(); shared {
		r.rescan = replayRescanEvery
	}
	return r
}

// replayRescanEvery is how often a gateway on a shared store looks for
// bulk replays left running by a gateway that died.
var replayRescanEvery = 5 * time.Second

// Start resumes the jobs left running by an earlier process and accepts
// new ones. It returns at once; Start after Start or Stop does nothing.
func (r *replayRunner) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != runnerNew {
		return
	}
	r.state = runnerRunning
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.resume(ctx, true)
		if r.rescan <= 0 {
			return
		}
		t := time.NewTicker(r.rescan)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.resume(ctx, false)
			}
		}
	}()
}

// Stop cancels the running jobs and waits until their goroutines are gone;
// each job's stored progress is that of its last write. It is idempotent.
func (r *replayRunner) Stop() {
	r.mu.Lock()
	r.state = runnerStopped
	if r.cancel != nil {
		r.cancel()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// Submit runs a stored job. Before Start or after Stop it does nothing:
// the job stays running in the store and the next start resumes it.
func (r *replayRunner) Submit(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != runnerRunning || r.active[id] {
		return
	}
	r.active[id] = true
	r.wg.Add(1)
	ctx := r.ctx
	go func() {
		defer r.wg.Done()
		r.runLocked(ctx, id)
		r.mu.Lock()
		delete(r.active, id)
		r.mu.Unlock()
	}()
}

// runLocked runs a job while it holds the job's lock; a job another
// gateway holds is left to it. A lost lock (this gateway's connection to
// the store ended, so another may take the job over) stops the run: the
// job's stored progress is that of its last write.
func (r *replayRunner) runLocked(ctx context.Context, id string) {
	unlock, lost, ok, err := r.lock(ctx, lockReplay+id)
	if err != nil || !ok {
		if err != nil && ctx.Err() == nil {
			r.log.Warn("lock a replay to run it; trying again later", "replay", id, "err", err)
		}
		return
	}
	defer unlock()
	if lost != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-lost:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	r.run(ctx, id)
}

// resume submits the jobs the store has running; first says it is the
// start's look (a rescan finds mostly jobs other gateways run, and says
// nothing of them).
func (r *replayRunner) resume(ctx context.Context, first bool) {
	jobs, err := r.store.ListReplays(ctx, storage.ReplayRunning)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Error("list replays to resume", "err", err)
		}
		return
	}
	for _, job := range jobs {
		if first {
			r.log.Info("resuming replay", "replay", job.ID, "enqueued", job.Enqueued)
		}
		r.Submit(job.ID)
	}
}

// run works through one job, batch after batch, until it is done, fails,
// or ctx ends (then it stays running, to be resumed).
func (r *replayRunner) run(ctx context.Context, id string) {
	// Read the job again: it may have finished since it was listed. A
	// read that fails is retried like a step: given up at once, the job
	// would show as running until the next start.
	var job storage.ReplayJob
	err := backoff.Retry(func() error {
		var err error
		job, err = r.store.GetReplay(ctx, id)
		if errors.Is(err, storage.ErrNotFound) || ctx.Err() != nil {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(replayBackoff(), ctx))
	if err != nil {
		if ctx.Err() == nil {
			r.log.Error("read replay", "replay", id, "err", err)
		}
		return
	}
	for job.State == storage.ReplayRunning && ctx.Err() == nil {
		if err := r.stepWithRetry(ctx, &job); err != nil {
			if ctx.Err() == nil {
				r.fail(ctx, &job, err)
			}
			return
		}
	}
}

// replayRetryFor is how long a failing step is retried before its job
// fails.
var replayRetryFor = time.Minute

// stepWithRetry takes one step (a batch of events), trying again with
// backoff while it fails with a store error (a full disk, a store briefly
// unwritable) for up to replayRetryFor: a bulk replay of a month of events
// should not fail for good on one failed write. A try goes on from the
// job's stored progress (step): what a write stored is not written again.
// A bad cursor fails the job at once.
func (r *replayRunner) stepWithRetry(ctx context.Context, job *storage.ReplayJob) error {
	tried := false
	return backoff.Retry(func() error {
		if tried {
			// A write reported failed may have been stored all the
			// same (a lost answer): go on from what the store has.
			stored, err := r.store.GetReplay(ctx, job.ID)
			if err != nil {
				return err
			}
			*job = stored
			if job.State != storage.ReplayRunning {
				return nil
			}
		}
		tried = true
		err := r.step(ctx, job)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, storage.ErrBadCursor), ctx.Err() != nil:
			return backoff.Permanent(err)
		}
		r.log.Warn("replay step failed; retrying", "replay", job.ID, "err", err)
		return err
	}, backoff.WithContext(replayBackoff(), ctx))
}

// replayBackoff paces the tries of a job's store operation that failed:
// for up to replayRetryFor.
func replayBackoff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, replayRetryFor
	return b
}

// replayed is one listed event of a step and the deliveries chosen for it.
type replayed struct {
	event  string
	ds     []storage.Delivery
	chosen map[string]time.Time // endpoint id → its CreatedAt when chosen
}

// step lists the batch of events after the job's cursor, but those of it
// already written, chooses their deliveries, and writes them in writes of
// whole events, each with the job's progress (EnqueueReplay): a job
// stopped or killed anywhere resumes exactly after the last event whose
// deliveries are stored, and none is enqueued twice. job is updated as
// each write succeeds.
func (r *replayRunner) step(ctx context.Context, job *storage.ReplayJob) error {
	evs, next, err := r.store.ListEvents(ctx, storage.EventFilter{
		Tenant: job.Tenant, Source: job.Source, State: job.EventState, Since: job.Since, Until: replayUntil(job),
		Limit: replayBatch, Cursor: job.Cursor,
	})
	if err != nil {
		return err
	}
	if job.Written != "" {
		// Newest first: those up to Written are written.
		evs = slices.DeleteFunc(evs, func(ev storage.Event) bool { return ev.ID >= job.Written })
	}
	// Chosen without holding the registry: with a status filter this
	// reads every event's deliveries, and an endpoint's delete (and the
	// ingests queued behind it) would wait for all of that.
	snap := r.reg.current()
	now := time.Now().UTC()
	batch := make([]replayed, len(evs))
	for i := range evs {
		eps, err := r.targets(ctx, job, &evs[i], snap)
		if err != nil {
			return err // listed again next time
		}
		batch[i] = replayed{event: evs[i].ID, ds: storage.NewDeliveries(&evs[i], eps, now), chosen: map[string]time.Time{}}
		for _, ep := range eps {
			batch[i].chosen[ep.ID] = ep.CreatedAt
		}
	}
	if len(batch) == 0 {
		return r.write(ctx, job, nil, true, next) // only the progress past the batch
	}
	for len(batch) > 0 {
		n := writeSize(batch)
		if err := r.write(ctx, job, batch[:n], n == len(batch), next); err != nil {
			return err
		}
		batch = batch[n:]
	}
	return nil
}

// writeSize is how many events of batch go into one write: whole events,
// as many as fit in replayWriteMax deliveries (at least one, however many
// deliveries it has). A batch of 100 events to 150 endpoints was one
// write too big for the store, and every such replay failed.
func writeSize(batch []replayed) int {
	n, size := 0, 0
	for n < len(batch) && (n == 0 || size+len(batch[n].ds) <= replayWriteMax) {
		size += len(batch[n].ds)
		n++
	}
	return n
}

// replayWriteMax bounds the deliveries of one replay write.
const replayWriteMax = 2000

// write stores the deliveries of some events of a step with the job's
// progress past them; last says they end the step, whose batch is
// followed by next. Deliveries to endpoints deleted since they were chosen
// (or deleted and created again: ids can be reused) are dropped; an event
// purged meanwhile (ErrNotFound) is skipped, written event by event.
func (r *replayRunner) write(ctx context.Context, job *storage.ReplayJob, evs []replayed, last bool, next string) error {
	err := r.writeOnce(ctx, job, evs, last, next)
	if errors.Is(err, storage.ErrNotFound) && len(evs) > 1 {
		// An event was purged by retention since it was listed: one by
		// one, then, each with its progress, and each taking the registry
		// for itself (taken again while held, it could wait behind a
		// queued delete that waits for it).
		for i := range evs {
			if err := r.write(ctx, job, evs[i:i+1], last && i == len(evs)-1, next); err != nil {
				return err
			}
		}
		return nil
	}
	return err
}

// writeOnce is one write of write's, with the registry held. It returns
// ErrNotFound, having written nothing, when an event of several is gone.
func (r *replayRunner) writeOnce(ctx context.Context, job *storage.ReplayJob, evs []replayed, last bool, next string) error {
	snap, done := r.reg.use()
	defer done()
	var ds []storage.Delivery
	matched := 0
	for _, ev := range evs {
		kept := slices.DeleteFunc(slices.Clone(ev.ds), func(d storage.Delivery) bool {
			ep := snap.endpoint(d.Tenant, d.Endpoint)
			return ep == nil || !ep.CreatedAt.Equal(ev.chosen[d.Endpoint])
		})
		if len(ev.ds) > 0 {
			matched++
		}
		ds = append(ds, kept...)
	}
	progress := *job
	progress.Matched += matched
	progress.Enqueued += len(ds)
	progress.UpdatedAt = time.Now().UTC()
	if last {
		progress.Cursor, progress.Written = next, ""
		if next == "" {
			progress.State = storage.ReplayCompleted
		}
	} else if len(evs) > 0 {
		progress.Written = evs[len(evs)-1].event
	}
	err := r.store.EnqueueReplay(ctx, &progress, ds)
	if errors.Is(err, storage.ErrNotFound) && len(evs) > 1 {
		return err
	}
	if errors.Is(err, storage.ErrNotFound) {
		// Its event is gone: only the progress past it.
		progress.Matched, progress.Enqueued, ds = job.Matched, job.Enqueued, nil
		err = r.store.EnqueueReplay(ctx, &progress, nil)
	}
	if err != nil {
		return err
	}
	*job = progress
	r.notifyAll(ds)
	return nil
}

// replayUntil is the job's upper bound, at most its creation: events
// received after the job started got their own deliveries.
func replayUntil(job *storage.ReplayJob) time.Time {
	if job.Until.IsZero() || job.Until.After(job.CreatedAt) {
		return job.CreatedAt
	}
	return job.Until
}

// targets are the endpoints an event is replayed to. Without a status
// filter: the endpoints that subscribe to it now. With one: the enabled
// endpoints whose latest delivery of it is in that state. The job's
// endpoint filter narrows either.
func (r *replayRunner) targets(ctx context.Context, job *storage.ReplayJob, ev *storage.Event, snap *snapshot) ([]storage.Endpoint, error) {
	eps := snap.byTenant[ev.Tenant]
	var out []storage.Endpoint
	if job.Status == "" {
		out = inbound.Subscribers(eps, ev.Tenant, ev.Source, ev.Type)
	} else {
		// Every page of the event's deliveries, newest first, until each
		// endpoint has its latest: an event replayed many times has more
		// than a page, and an endpoint's latest may be on a later one.
		// A delivery older than the endpoint that has its id now was an
		// earlier endpoint's (deleted, the id made again): not this one's,
		// which may not even subscribe to the event.
		created := map[string]time.Time{}
		for _, ep := range eps {
			created[ep.ID] = ep.CreatedAt
		}
		latest := map[string]storage.DeliveryState{}
		for cursor := ""; ; {
			ds, next, err := r.store.ListDeliveries(ctx, storage.DeliveryFilter{Event: ev.ID, Limit: admin.MaxPageLimit, Cursor: cursor})
			if err != nil {
				return nil, err
			}
			for _, d := range ds {
				if _, seen := latest[d.Endpoint]; !seen && !d.CreatedAt.Before(created[d.Endpoint]) {
					latest[d.Endpoint] = d.State
				}
			}
			if next == "" || !slices.ContainsFunc(eps, func(ep storage.Endpoint) bool { _, seen := latest[ep.ID]; return !seen }) {
				break
			}
			cursor = next
		}
		for _, ep := range eps {
			if !ep.Disabled && latest[ep.ID] == storage.DeliveryState(job.Status) {
				out = append(out, ep)
			}
		}
	}
	if job.Endpoint == "" {
		return out, nil
	}
	for _, ep := range out {
		if ep.ID == job.Endpoint {
			return []storage.Endpoint{ep}, nil
		}
	}
	return nil, nil
}

func (r *replayRunner) notifyAll(ds []storage.Delivery) {
	if len(ds) == 0 {
		return
	}
	seen := map[string]bool{}
	var ids []string
	for _, d := range ds {
		if !seen[d.Endpoint] {
			seen[d.Endpoint] = true
			ids = append(ids, d.Endpoint)
		}
	}
	r.notify(ids...)
}

// fail records a job that cannot go on. The stored error is generic: the
// log has the cause. The write is retried like a step (a job left running
// in the store would show as running until the next start resumed it);
// a shutdown cuts that short, and the next start resumes the job.
func (r *replayRunner) fail(ctx context.Context, job *storage.ReplayJob, err error) {
	r.log.Error("replay failed", "replay", job.ID, "err", err)
	if stored, gerr := r.store.GetReplay(ctx, job.ID); gerr == nil {
		*job = stored // its progress as stored: a write reported failed may have been kept
	}
	job.State = storage.ReplayFailed
	job.Error = "the replay stopped on a store error; see the gateway's log"
	if errors.Is(err, storage.ErrBadCursor) {
		job.Error = "the replay's cursor is invalid"
	}
	job.UpdatedAt = time.Now().UTC()
	err = backoff.Retry(func() error {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replayWriteTimeout)
		defer cancel()
		return r.store.PutReplay(wctx, job)
	}, backoff.WithContext(replayBackoff(), ctx))
	if err != nil {
		r.log.Error("record failed replay", "replay", job.ID, "err", err)
	}
}
