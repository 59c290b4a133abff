package gateway

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"hookgate/inbound"
	"hookgate/storage"
)

// replayBatch is how many events one step of a bulk replay reads: their
// deliveries are enqueued in one write, then the job's progress (counts
// and cursor) in another.
const replayBatch = 100

// replayWriteTimeout bounds a progress write, which is not cut short by a
// shutdown: the deliveries it accounts for are already enqueued.
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
// after every batch, so a job cut short by a shutdown or a crash resumes
// from its cursor at the next start. A batch enqueued just before a crash,
// whose progress write was lost, is enqueued again on resume: bulk replays
// are at least once, like every delivery, and the copies carry the same
// Idempotency-Key.
type replayRunner struct {
	store  storage.Store
	reg    *registry
	notify func(endpoints ...string)
	log    *slog.Logger

	mu     sync.Mutex
	state  runnerState
	ctx    context.Context
	cancel context.CancelFunc
	active map[string]bool // jobs with a goroutine
	wg     sync.WaitGroup
}

func newReplayRunner(g *Gateway) *replayRunner {
	return &replayRunner{
		store: g.store, reg: g.reg, log: g.log.With("component", "replay"), active: map[string]bool{},
		notify: func(eps ...string) { g.disp.Notify(eps...) },
	}
}

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
		r.resume(ctx)
	}()
}

// Stop cancels the running jobs and waits until their goroutines are gone;
// each has recorded the progress of its last finished batch. It is
// idempotent.
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
		r.run(ctx, id)
		r.mu.Lock()
		delete(r.active, id)
		r.mu.Unlock()
	}()
}

func (r *replayRunner) resume(ctx context.Context) {
	jobs, err := r.store.ListReplays(ctx, storage.ReplayRunning)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Error("list replays to resume", "err", err)
		}
		return
	}
	for _, job := range jobs {
		r.log.Info("resuming replay", "replay", job.ID, "enqueued", job.Enqueued)
		r.Submit(job.ID)
	}
}

// run works through one job, batch after batch, until it is done, fails,
// or ctx ends (then it stays running, to be resumed).
func (r *replayRunner) run(ctx context.Context, id string) {
	// Read the job again: it may have finished since it was listed.
	job, err := r.store.GetReplay(ctx, id)
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
// should not fail for good on one failed write. A try goes on from where
// the last one stopped (replayStep): what a write stored is not written
// again, and the batch's targets are not chosen again (with a status
// filter, the copies already written would change them). A bad cursor
// fails the job at once.
func (r *replayRunner) stepWithRetry(ctx context.Context, job *storage.ReplayJob) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, replayRetryFor
	var st replayStep
	err := backoff.Retry(func() error {
		err := r.advance(ctx, job, &st)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, storage.ErrBadCursor), ctx.Err() != nil:
			return backoff.Permanent(err)
		}
		r.log.Warn("replay step failed; retrying", "replay", job.ID, "err", err)
		return err
	}, backoff.WithContext(b, ctx))
	if err != nil && ctx.Err() != nil && (len(st.written) > 0 || st.recorded) {
		// Stopped after the step stored deliveries (a step is several
		// writes): finish it, its last writes and its progress, or the
		// next start would list the batch again and enqueue those twice.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replayWriteTimeout)
		defer cancel()
		if ferr := r.advance(fctx, job, &st); ferr != nil {
			r.log.Warn("replay stopped in the middle of a step; the next start enqueues its batch again",
				"replay", job.ID, "err", ferr)
		}
	}
	return err
}

// replayStep is how far a step got: its batch listed (and the deliveries
// to write chosen), those written so far, and whether the job has taken
// it in (then only the progress write is left).
type replayStep struct {
	listed   bool
	next     string               // the cursor after the batch
	ds       []storage.Delivery   // chosen and not yet written
	chosen   map[string]time.Time // endpoint id → its CreatedAt when chosen
	written  []storage.Delivery   // to notify the dispatcher of
	matched  int
	enqueued int
	recorded bool
}

// advance takes a step as far as it goes: list a batch and choose its
// deliveries, write them, take them into the job, write its progress.
func (r *replayRunner) advance(ctx context.Context, job *storage.ReplayJob, st *replayStep) error {
	if !st.recorded {
		if err := r.write(ctx, job, st); err != nil {
			return err
		}
		job.Matched += st.matched
		job.Enqueued += st.enqueued
		job.Cursor = st.next
		job.UpdatedAt = time.Now().UTC()
		if st.next == "" {
			job.State = storage.ReplayCompleted
		}
		st.recorded = true
		r.notifyAll(st.written)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replayWriteTimeout)
	defer cancel()
	return r.store.PutReplay(wctx, job)
}

// write lists the step's batch and chooses its deliveries (once), then
// writes those not written yet.
func (r *replayRunner) write(ctx context.Context, job *storage.ReplayJob, st *replayStep) error {
	if !st.listed {
		evs, next, err := r.store.ListEvents(ctx, storage.EventFilter{
			Tenant: job.Tenant, Source: job.Source, Since: job.Since, Until: replayUntil(job),
			Limit: replayBatch, Cursor: job.Cursor,
		})
		if err != nil {
			return err
		}
		// Chosen without holding the registry: with a status filter this
		// reads every event's deliveries, and an endpoint's delete (and the
		// ingests queued behind it) would wait for all of that.
		snap := r.reg.current()
		now := time.Now().UTC()
		var ds []storage.Delivery
		matched := 0
		chosen := map[string]time.Time{}
		for i := range evs {
			eps, err := r.targets(ctx, job, &evs[i], snap)
			if err != nil {
				return err // listed again next time
			}
			if len(eps) > 0 {
				matched++
				ds = append(ds, inbound.NewDeliveries(&evs[i], eps, now)...)
			}
			for _, ep := range eps {
				chosen[ep.ID] = ep.CreatedAt
			}
		}
		st.ds, st.next, st.matched, st.chosen, st.listed = ds, next, matched, chosen, true
	}
	// Held while writing: an endpoint deleted since the choice (or deleted
	// and created again: ids can be reused) gets none.
	snap, done := r.reg.use()
	defer done()
	st.ds = slices.DeleteFunc(st.ds, func(d storage.Delivery) bool {
		ep := snap.endpoint(d.Tenant, d.Endpoint)
		return ep == nil || !ep.CreatedAt.Equal(st.chosen[d.Endpoint])
	})
	handled, stored, err := r.enqueue(ctx, st.ds)
	st.written = append(st.written, st.ds[:handled]...)
	st.ds = st.ds[handled:]
	st.enqueued += stored
	return err
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
		latest := map[string]storage.DeliveryState{}
		for cursor := ""; ; {
			ds, next, err := r.store.ListDeliveries(ctx, storage.DeliveryFilter{Event: ev.ID, Limit: maxPageLimit, Cursor: cursor})
			if err != nil {
				return nil, err
			}
			for _, d := range ds {
				if _, seen := latest[d.Endpoint]; !seen {
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

// enqueue stores new deliveries: it returns how many of ds it is done
// with (stored, or skipped because retention deleted their event
// meanwhile) and how many it stored, also when a write fails halfway.
func (r *replayRunner) enqueue(ctx context.Context, ds []storage.Delivery) (handled, stored int, err error) {
	// In writes of at most replayWriteMax deliveries (an event's stay
	// together): a batch of 100 events to 150 endpoints was one write too
	// big for the store, and every such replay failed.
	for handled < len(ds) {
		rest := ds[handled:]
		// Whole events, as many as fit (at least one, however many
		// deliveries it has).
		end := 0
		for end < len(rest) {
			next := end + 1
			for next < len(rest) && rest[next].Event == rest[end].Event {
				next++
			}
			if end > 0 && next > replayWriteMax {
				break
			}
			end = next
		}
		h, k, err := r.enqueueWrite(ctx, rest[:end])
		handled += h
		stored += k
		if err != nil {
			return handled, stored, err
		}
	}
	return handled, stored, nil
}

// replayWriteMax bounds the deliveries of one replay write.
const replayWriteMax = 2000

// enqueueWrite writes deliveries in one write; if an event was purged
// meanwhile (ErrNotFound), event by event, skipping the purged ones. It
// returns how many of ds are done with (stored or skipped) and how many
// were stored.
func (r *replayRunner) enqueueWrite(ctx context.Context, ds []storage.Delivery) (handled, stored int, err error) {
	if len(ds) == 0 {
		return 0, 0, nil
	}
	err = r.store.Enqueue(ctx, ds)
	if !errors.Is(err, storage.ErrNotFound) {
		if err != nil {
			return 0, 0, err
		}
		return len(ds), len(ds), nil
	}
	for start := 0; start < len(ds); {
		end := start + 1
		for end < len(ds) && ds[end].Event == ds[start].Event {
			end++
		}
		switch err := r.store.Enqueue(ctx, ds[start:end]); {
		case err == nil:
			stored += end - start
		case !errors.Is(err, storage.ErrNotFound):
			return start, stored, err
		}
		start = end
	}
	return len(ds), stored, nil
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
	job.State = storage.ReplayFailed
	job.Error = "the replay stopped on a store error; see the gateway's log"
	if errors.Is(err, storage.ErrBadCursor) {
		job.Error = "the replay's cursor is invalid"
	}
	job.UpdatedAt = time.Now().UTC()
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, replayRetryFor
	err = backoff.Retry(func() error {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replayWriteTimeout)
		defer cancel()
		return r.store.PutReplay(wctx, job)
	}, backoff.WithContext(b, ctx))
	if err != nil {
		r.log.Error("record failed replay", "replay", job.ID, "err", err)
	}
}
