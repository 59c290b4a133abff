package outbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"hookgate/storage"
)

// minIdleWait keeps a loop from spinning: if the store reports a due
// delivery that it then does not hand out, or a rate token is a rounding
// error away.
const minIdleWait = time.Millisecond

// endpointLoop delivers one endpoint's outbox. Its goroutine claims; each
// claimed delivery is sent by its own goroutine, which writes the outcome
// and frees its slot. A slow or failing endpoint only fills its own slots.
type endpointLoop struct {
	d      *Dispatcher
	id     string
	wake   chan struct{}      // capacity 1: a pending "look again"
	cancel context.CancelFunc // ends run; set by startLoop
	// removed is set once the endpoint is gone from the dispatcher.
	removed atomic.Bool
	passes  atomic.Int64 // planning passes so far (tests wait on it)

	mu       sync.Mutex
	ep       storage.Endpoint
	limiter  *rate.Limiter // nil when rate_limit is 0
	inFlight int
	circuit  circuit
	// probe names the half-open probe in flight: moved on by each probe
	// claimed and each reset, so that an attempt's outcome frees the probe
	// slot only if it was that probe (not one of an endpoint since moved).
	probe uint64
	// resumes counts resume calls, so that a sweep can tell whether an
	// operator resumed the endpoint while its claim was written.
	resumes uint64
	// hold is when the endpoint may be sent to again after a 429 or 503
	// with Retry-After: the receiver asked for nothing at all until then
	// (RFC 6585 §4), not only the retry of that one delivery.
	hold time.Time
	// holdStored is true while the store may keep a hold of this endpoint
	// (one was read at start or written with an outcome): the next success
	// ends it there (Outcome.EndHold), and only then.
	holdStored bool

	// swept is when expirePaused last looked (the loop goroutine only).
	swept time.Time
	// gatePaused is true while the store's gates (Config.Gates) pause the
	// endpoint, so that a pause is logged once (the loop goroutine only).
	gatePaused bool
	// gateUntil is when the store's gates last said a pause ends (under
	// mu, for EndpointPause).
	gateUntil time.Time
	// gateClaimed is set once a claim through the store's gates took a
	// delivery (the loop goroutine only).
	gateClaimed bool
}

func newEndpointLoop(d *Dispatcher, ep storage.Endpoint) *endpointLoop {
	l := &endpointLoop{
		d:    d,
		id:   ep.ID,
		wake: make(chan struct{}, 1),
		circuit: circuit{
			threshold: d.cfg.CircuitFailures,
			minCool:   d.cfg.CircuitCooldown,
			maxCool:   d.cfg.CircuitMaxCooldown,
		},
	}
	l.update(ep)
	if d.cfg.Gates != nil {
		return l // the store's claim applies the pause
	}
	// A pause the receiver asked for outlives a restart: the store kept it
	// with the outcome that asked (a receiver at another URL asked for
	// nothing here).
	if until, url, err := d.cfg.Store.EndpointHold(context.Background(), ep.ID, d.cfg.Now()); err != nil {
		d.log.Warn("read the endpoint's Retry-After pause", "endpoint", ep.ID, "err", err)
	} else if !until.IsZero() {
		l.holdStored = true
		if url == ep.URL {
			l.hold = until
		}
	}
	return l
}

// update applies new endpoint settings. A new rate gets a new limiter; an
// endpoint enabled again starts with a closed circuit.
func (l *endpointLoop) update(ep storage.Endpoint) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Re-enabled or moved to another URL: the failures that opened the
	// circuit were the old endpoint's, not this one's.
	if (l.ep.Disabled && !ep.Disabled) || l.ep.URL != ep.URL {
		l.resume()
	}
	if l.limiter == nil || ep.RateLimit != l.ep.RateLimit {
		l.limiter = newLimiter(ep.RateLimit)
	}
	l.ep = ep
}

// newLimiter paces attempts at r per second (nil = unlimited). The burst
// is a tenth of a second's worth, at least one: claims can be batched
// without exceeding the rate by more than that over any second.
func newLimiter(r float64) *rate.Limiter {
	if r <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(r), max(1, int(math.Ceil(r/10))))
}

// poke asks the loop to look at its outbox again; it never blocks.
func (l *endpointLoop) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run claims and dispatches until ctx ends.
func (l *endpointLoop) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wait := l.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		if wait <= 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-timer.C:
		}
	}
}

// plan is what one pass may claim. Its slots and rate tokens are taken
// when it is made, so that an ingest's Reserve while the claim is being
// written sees them gone; claimed gives back what the claim did not use.
type plan struct {
	ep     storage.Endpoint
	n      int               // how many to claim; 0 = none now
	wait   time.Duration     // when n is 0: the longest wait before the next pass
	tokens *rate.Reservation // the n rate tokens taken, if rate-limited
	paused bool              // n is 0 because the circuit is open or a Retry-After holds
	// resumed is set by a claim through the store's gates that took
	// deliveries after they paused the endpoint (or the loop's first):
	// one of them may be the probe that closes its circuit.
	resumed bool
}

// pass claims what the endpoint may take now and starts sending it. It
// returns how long to wait before the next pass (0 = at once), unless a
// poke comes first.
func (l *endpointLoop) pass(ctx context.Context) time.Duration {
	l.passes.Add(1)
	now := l.d.cfg.Now()
	p := l.plan(now)
	if p.n == 0 {
		if p.paused {
			return min(p.wait, l.expirePaused(ctx, &p.ep, now))
		}
		return p.wait
	}
	jobs, wait, err := l.claim(ctx, &p, now)
	if err != nil {
		l.claimed(p, 0, now) // gives the slots back
		if ctx.Err() == nil {
			l.d.log.Error("claim deliveries", "endpoint", l.id, "err", err)
		}
		return l.d.cfg.Poll
	}
	if len(jobs) == 0 && !wait.Until.IsZero() {
		// The store's gates held: look again when they may let one
		// through, and at least every poll (another gateway's probe or an
		// operator's resume may end the pause sooner).
		l.claimed(p, 0, now)
		next := min(max(wait.Until.Sub(now), minIdleWait), l.d.cfg.Poll)
		if wait.Paused {
			return min(next, l.expirePaused(ctx, &p.ep, now))
		}
		return next
	}
	probe := l.claimed(p, len(jobs), now)
	if len(jobs) > 0 && l.changedSince(ctx, &p.ep) {
		// The endpoint was changed (disabled, moved, its secret replaced)
		// or deleted while the claim was written: what it took is given
		// back, due now, to be claimed again as the endpoint is now. Sent,
		// it went to the old URL, with the old secret, or after a 204.
		l.unprobe(probe)
		l.d.jobs.Add(1)
		go func() {
			defer l.d.jobs.Done()
			l.d.releaseAll(jobs, l.d.cfg.Now())
			for range jobs {
				l.finished()
			}
		}()
		return l.idleWait(ctx, false)
	}
	for i := range jobs {
		l.d.jobs.Add(1)
		go l.attempt(p.ep, &jobs[i], probe, p.resumed)
	}
	if len(jobs) == p.n {
		return 0 // there may be more due
	}
	return l.idleWait(ctx, len(jobs) > 0)
}

// claim takes what the plan may, through the store's gates when it keeps
// them (logging when they pause the endpoint and when they let it go).
func (l *endpointLoop) claim(ctx context.Context, p *plan, now time.Time) ([]storage.Job, storage.GateWait, error) {
	lease := l.d.leaseFor(&p.ep)
	if l.d.cfg.Gates == nil {
		jobs, err := l.d.cfg.Store.Claim(ctx, l.id, now, p.n, lease)
		return jobs, storage.GateWait{}, err
	}
	jobs, wait, err := l.d.cfg.Gates.ClaimGated(ctx, l.id, now, p.n, lease, l.d.circuitPolicy())
	if err == nil {
		l.mu.Lock()
		l.gateUntil = time.Time{}
		if wait.Paused {
			l.gateUntil = wait.Until
		}
		l.mu.Unlock()
	}
	switch {
	case err != nil:
	case wait.Paused && !l.gatePaused:
		l.gatePaused = true
		l.d.log.Warn("endpoint paused (circuit open after failures, or its receiver asked with Retry-After)",
			"endpoint", l.id, "until", wait.Until)
	case len(jobs) > 0 && l.gatePaused:
		l.gatePaused = false
		p.resumed = true
		l.d.log.Info("endpoint resumed", "endpoint", l.id)
	}
	if len(jobs) > 0 && !l.gateClaimed {
		l.gateClaimed = true
		p.resumed = true // the circuit may have opened before this loop started
	}
	return jobs, wait, err
}

// plan decides under the lock how many deliveries the next claim may take:
// none while disabled, the circuit is open or the slots are full, at most
// the free max_in_flight slots, the circuit's allowance and the rate
// limiter's tokens.
func (l *endpointLoop) plan(now time.Time) plan {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := plan{ep: l.ep, wait: l.d.cfg.Poll}
	free := maxInFlight(&l.ep) - l.inFlight
	if l.ep.Disabled || free <= 0 {
		return p // an update or a finished attempt pokes the loop
	}
	if l.d.cfg.Gates != nil {
		// The store applies the hold, circuit and rate in the claim. A
		// claim there is a transaction of several statements: while many
		// attempts are in flight, it waits for a batch of free slots (each
		// finished attempt pokes the loop) rather than claiming one by one.
		if l.inFlight > 0 && free < maxInFlight(&l.ep)/claimBatchOf {
			return p
		}
		p.n = min(free, storage.MaxClaim)
		l.inFlight += p.n
		return p
	}
	if l.held(now) {
		p.wait, p.paused = l.hold.Sub(now), true
		return p
	}
	allowed, until := l.circuit.allow(now)
	if allowed == 0 {
		if !until.IsZero() {
			p.wait, p.paused = until.Sub(now), true
		}
		return p
	}
	if allowed != unlimited {
		free = min(free, allowed)
	}
	if l.limiter != nil {
		tokens := l.limiter.TokensAt(now)
		if tokens < 1 {
			p.wait = tokenWait(tokens, float64(l.limiter.Limit()), l.d.cfg.Poll)
			return p
		}
		free = min(free, int(tokens))
	}
	p.n = min(free, storage.MaxClaim) // a full claim passes again at once
	l.inFlight += p.n
	if l.limiter != nil {
		p.tokens = l.limiter.ReserveN(now, p.n)
	}
	return p
}

// expirePaused fails, unsent, the due deliveries of a paused endpoint
// (circuit open, Retry-After hold) whose max_elapsed has passed. Only an
// attempt's outcome applies a retry policy, and a paused endpoint makes
// one attempt per cool-down (up to 5 minutes apart): behind a dead
// receiver a backlog stayed pending long past its window, never failed
// nor replayable as failed, and was purged so with its events once the
// retention window passed. It looks every tenth of max_elapsed, at most
// maxExpiryLag and at least Poll apart, at the MaxClaim earliest due
// deliveries; those still inside their window go back unsent, due as they
// were. A disabled endpoint is not paused: an operator's disable keeps its
// deliveries pending until it is enabled again.
//
// It returns when to look next.
func (l *endpointLoop) expirePaused(ctx context.Context, ep *storage.Endpoint, now time.Time) (next time.Duration) {
	p := WithDefaults(ep.Retry)
	every := max(l.d.cfg.Poll, min(p.MaxElapsed/10, maxExpiryLag))
	if wait := l.swept.Add(every).Sub(now); wait > 0 {
		return wait
	}
	l.swept = now
	due, ok, err := l.d.cfg.Store.NextDue(ctx, l.id)
	if err != nil || !ok || due.After(now) {
		return every
	}
	l.mu.Lock()
	resumes := l.resumes
	l.mu.Unlock()
	jobs, err := l.d.cfg.Store.Claim(ctx, l.id, now, storage.MaxClaim, l.d.leaseFor(ep))
	if err != nil {
		if ctx.Err() == nil {
			l.d.log.Error("claim deliveries of a paused endpoint", "endpoint", l.id, "err", err)
		}
		return every
	}
	// Those it keeps go back due as they were, so the earliest due (the
	// oldest, mostly) are the ones the next look takes again.
	var keep []storage.Job
	defer func() {
		if len(keep) > 0 {
			l.d.releaseAll(keep, time.Time{})
		}
	}()
	l.mu.Lock()
	resumed := l.resumes != resumes
	l.mu.Unlock()
	if resumed || l.changedSince(ctx, ep) {
		// Resumed (an operator's retry), disabled, moved or given another
		// policy while the claim was written (or stopping): the endpoint
		// as it is now decides.
		keep = jobs
		return every
	}
	var wg sync.WaitGroup
	for i := range jobs {
		d := &jobs[i].Delivery
		elapsed := now.Sub(retryFrom(d, now))
		switch {
		case d.Tenant != ep.Tenant:
			wg.Add(1)
			go func() { defer wg.Done(); l.d.cancelForeign(ep, &jobs[i]) }() // as attempt does
		case elapsed <= p.MaxElapsed:
			keep = append(keep, jobs[i])
		default:
			// Concurrent, so that the store commits them together.
			reason := fmt.Sprintf("not sent: gave up while the endpoint was paused, %s after the first attempt was due (max_elapsed %s)",
				elapsed.Round(time.Second), p.MaxElapsed)
			wg.Add(1)
			go func() { defer wg.Done(); l.d.expire(ep, &jobs[i], now, reason) }()
		}
	}
	wg.Wait()
	return every
}

// claimBatchOf: on a shared store, a loop with attempts in flight claims
// once at least 1/claimBatchOf of its max_in_flight is free.
const claimBatchOf = 8

// maxExpiryLag bounds how late expirePaused fails a delivery: well inside
// the MaxLease the retention sweep adds to the longest retry window, so a
// delivery fails before its event may be purged.
const maxExpiryLag = 10 * time.Minute

// tokenWait is how long until a rate limiter of limit tokens per second
// holding tokens (< 1) has one: at least minIdleWait, at most poll (the
// loop plans again then). A tiny rate_limit's wait does not fit in a
// Duration; converted, it came out negative, and the loop woke every
// millisecond for as long as the endpoint existed.
func tokenWait(tokens, limit float64, poll time.Duration) time.Duration {
	secs := (1 - tokens) / limit
	if !(secs < poll.Seconds()) { // also NaN, +Inf
		return max(poll, minIdleWait)
	}
	return max(time.Duration(secs*float64(time.Second)), minIdleWait)
}

// maxInFlight is the endpoint's max_in_flight, or the default when unset,
// at most MaxMaxInFlight.
func maxInFlight(ep *storage.Endpoint) int {
	if ep.MaxInFlight <= 0 {
		return DefaultMaxInFlight
	}
	return min(ep.MaxInFlight, MaxMaxInFlight)
}

// changedSince reports whether the loop's endpoint is no longer as it was
// (claimedWith) when a claim was planned, or the loop was removed.
func (l *endpointLoop) changedSince(ctx context.Context, claimedWith *storage.Endpoint) bool {
	return ctx.Err() != nil || !l.sendsTo(claimedWith)
}

// sendsTo reports whether ep is still the loop's endpoint as it is now:
// not removed, not disabled, not changed since.
func (l *endpointLoop) sendsTo(ep *storage.Endpoint) bool {
	if l.removed.Load() {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.ep.Disabled && l.ep.UpdatedAt.Equal(ep.UpdatedAt) && sameTarget(&l.ep, ep)
}

// claimed settles a plan whose claim took n deliveries: the slots and
// rate tokens it did not use go back, and n of them count for the
// half-open probe. It returns the probe's name if they are the circuit's
// probe, else 0.
func (l *endpointLoop) claimed(p plan, n int, now time.Time) (probe uint64) {
	unused := p.n - n
	l.mu.Lock()
	if unused > 0 {
		l.inFlight -= unused
		if p.tokens != nil {
			p.tokens.CancelAt(now)
			if n > 0 && l.limiter != nil {
				l.limiter.ReserveN(now, n)
			}
		}
	}
	if n > 0 && l.circuit.claimed(n) {
		l.probe++
		probe = l.probe
	}
	l.mu.Unlock()
	return probe
}

// idleWait is how long to wait when the outbox had less due than the loop
// could take: until the next due time, at most the poll interval.
func (l *endpointLoop) idleWait(ctx context.Context, progressed bool) time.Duration {
	due, ok, err := l.d.cfg.Store.NextDue(ctx, l.id)
	if err != nil {
		if ctx.Err() == nil {
			l.d.log.Error("next due delivery", "endpoint", l.id, "err", err)
		}
		return l.d.cfg.Poll
	}
	if !ok {
		return l.d.cfg.Poll
	}
	wait := min(due.Sub(l.d.cfg.Now()), l.d.cfg.Poll)
	if wait <= 0 && !progressed {
		return minIdleWait
	}
	return wait
}

// attempt sends one claimed delivery and records its outcome, or releases
// the claim when a shutdown abandoned the attempt. It alone moves the
// in-flight gauge: the slots a claim reserves before it is written are
// not attempts (an idle endpoint showed max_in_flight for every claim).
func (l *endpointLoop) attempt(ep storage.Endpoint, job *storage.Job, probe uint64, resumed bool) {
	defer l.d.jobs.Done()
	defer l.finished()
	l.d.cfg.Metrics.InFlight(l.id, 1)
	defer l.d.cfg.Metrics.InFlight(l.id, -1)
	d := l.d
	if job.Delivery.Tenant != ep.Tenant {
		d.cancelForeign(&ep, job)
		l.unprobe(probe) // no outcome for this endpoint: let another probe go
		return
	}
	res := d.sender.send(d.attemptCtx, &ep, job, func() bool { return l.sendsTo(&ep) })
	if res.unsent {
		// The endpoint changed (or went) after this attempt was planned:
		// given back, due now, to go as the endpoint is now.
		l.unprobe(probe)
		d.release(job)
		return
	}
	if d.attemptCtx.Err() != nil && res.answer.StatusCode == 0 {
		d.cut.Add(1) // counted for the shutdown's warning
		d.release(job)
		return
	}
	end := d.cfg.Now()
	dec := Decide(ep.Retry, &job.Delivery, res.answer, end)
	hold := l.holdFor(&ep, res.answer, end)
	endHold := dec.Verdict == VerdictSucceeded && l.takeStoredHold()
	// A store that keeps the circuit counts the outcome in its write, if
	// the attempt went to the endpoint as it is now.
	circuit := d.cfg.Gates != nil && l.sendsTo(&ep)
	// The circuit's change is decided before the write, so that its
	// operational event goes into the outcome's write.
	change := l.record(&ep, dec.Verdict == VerdictSucceeded, probe, end)
	out := d.outcome(&ep, job, &res, dec, hold, endHold, circuit)
	d.addNotices(out, &ep, job, dec, change, resumed, end)
	recorded := d.complete(&ep, job, out, dec)
	if endHold && !recorded {
		l.mu.Lock()
		l.holdStored = true // not ended: the next success tries again
		l.mu.Unlock()
	}
	// Only what the store kept is counted: an outcome dropped with its
	// lease (the delivery was cancelled by an endpoint's delete, or
	// retried) would count a delivery that did not end so, and bring back
	// the series of a deleted endpoint.
	if recorded {
		d.cfg.Metrics.Attempt(ep.ID, dec.Verdict, res.attempt.Latency)
		if dec.Verdict == VerdictSucceeded && !job.Event.ReceivedAt.IsZero() {
			d.cfg.Metrics.Delivered(ep.ID, end.Sub(job.Event.ReceivedAt))
		}
	}
	if dec.Verdict == VerdictDisable {
		d.disable(l, &ep, dec.Reason)
	}
}

// holdFor pauses the endpoint for the wait a 429 or 503 asks for in its
// Retry-After, capped at the endpoint's max_interval as a retry's is, so
// that no delivery goes to it before then: a hand-off of a new event, or
// another pending delivery, would answer the receiver's "not now" at once.
// An answer of an endpoint since moved says nothing of it now. It returns
// the pause asked for (zero if none), for the store to keep with the
// attempt's outcome.
func (l *endpointLoop) holdFor(sent *storage.Endpoint, a Answer, now time.Time) time.Time {
	asked, ok := retryAfter(a, now)
	if !ok || asked <= 0 {
		return time.Time{}
	}
	until := now.Add(min(asked, WithDefaults(sent.Retry).MaxInterval))
	l.mu.Lock()
	defer l.mu.Unlock()
	if !sameTarget(&l.ep, sent) {
		return time.Time{}
	}
	if until.After(l.hold) {
		l.hold = until
	}
	l.holdStored = true
	return until
}

// takeStoredHold reports whether the store may keep a hold of the
// endpoint, and forgets it: the success being recorded ends it there.
func (l *endpointLoop) takeStoredHold() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	stored := l.holdStored
	l.holdStored = false
	return stored
}

// held reports whether the endpoint is paused by a Retry-After at now.
// The caller holds l.mu.
func (l *endpointLoop) held(now time.Time) bool { return now.Before(l.hold) }

// resume forgets the endpoint's recent failures: its circuit closes (a
// probe in flight no longer counts as one) and a Retry-After pause ends.
// The caller holds l.mu.
func (l *endpointLoop) resume() {
	l.circuit.reset()
	l.gateUntil = time.Time{}
	l.probe++
	l.resumes++
	l.hold = time.Time{}
}

// finished frees an attempt's slot and pokes the loop to fill it.
func (l *endpointLoop) finished() {
	l.mu.Lock()
	l.inFlight--
	l.mu.Unlock()
	l.poke()
}

// record feeds an attempt's outcome to the circuit and logs a change. An
// attempt sent to an endpoint since moved to another URL (or replaced by a
// new one with the same id) says nothing of the endpoint now: it only frees
// the probe slot, if it still holds it.
func (l *endpointLoop) record(sent *storage.Endpoint, ok bool, probe uint64, now time.Time) (change circuitChange) {
	if l.d.cfg.Gates != nil {
		return change // the store counts it (Outcome.Circuit)
	}
	l.mu.Lock()
	current := probe != 0 && probe == l.probe
	if !sameTarget(&l.ep, sent) {
		if current {
			l.circuit.probing = false
		}
		l.mu.Unlock()
		return change
	}
	from, to := l.circuit.record(ok, current, now)
	cool, until := l.circuit.cool, l.circuit.until
	l.mu.Unlock()
	switch {
	case from == to:
	case to == circuitOpen:
		l.d.log.Warn("endpoint paused after failures", "endpoint", l.id, "circuit", to.String(), "cooldown", cool)
	case to == circuitClosed:
		l.d.log.Info("endpoint resumed", "endpoint", l.id, "circuit", to.String())
	}
	switch {
	case from == circuitClosed && to == circuitOpen:
		return circuitChange{opened: true, until: until}
	case from != circuitClosed && to == circuitClosed:
		return circuitChange{closed: true}
	}
	return change
}

// circuitChange is what an outcome did to the in-memory circuit: opened
// it from closed (paused until until) or closed it after it was open. A
// failed probe that opens it again is neither.
type circuitChange struct {
	opened, closed bool
	until          time.Time
}

// unprobe frees the half-open circuit's probe slot after a probe that
// ended without an outcome for the endpoint.
func (l *endpointLoop) unprobe(probe uint64) {
	if probe == 0 {
		return
	}
	l.mu.Lock()
	if probe == l.probe {
		l.circuit.probing = false
	}
	l.mu.Unlock()
}

// markDisabled disables the endpoint in memory, so the loop stops
// claiming. It reports false when it already was, or when the loop's
// endpoint is no longer sent (the attempt's) but one created since with
// the same id, or the same one moved to another URL.
func (l *endpointLoop) markDisabled(sent *storage.Endpoint, reason string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ep.Disabled || !sameTarget(&l.ep, sent) {
		return false
	}
	l.ep.Disabled = true
	l.ep.DisabledReason = reason
	l.ep.UpdatedAt = now
	return true
}

// outcome is the store write of an attempt and the state it leads to.
func (d *Dispatcher) outcome(ep *storage.Endpoint, job *storage.Job, res *attemptResult, dec Decision, hold time.Time, endHold, circuit bool) *storage.Outcome {
	att := res.attempt
	if dec.Reason != "" {
		att.Error = joinError(att.Error, dec.Reason)
	}
	out := &storage.Outcome{
		Delivery:      job.Delivery.ID,
		Lease:         job.Delivery.LeaseUntil,
		Attempt:       att,
		State:         stateOf(dec.Verdict),
		NextAttemptAt: dec.NextAttemptAt,
		Interval:      dec.Interval,
		CountAttempt:  true,
	}
	if !hold.IsZero() {
		out.Hold, out.HoldURL = hold, ep.URL
	}
	out.EndHold, out.Circuit = endHold, circuit
	return out
}

// addNotices adds to out the operational events it raises: the delivery
// failed for good; the in-memory circuit opened or closed (change), or,
// for a store that keeps the circuit, the notices it writes if this
// outcome opens it (a failure) or closes it (a success of a claim after a
// pause: the probe is one). A 410 Gone raises the endpoint's own notice
// when it is disabled, not the circuit's.
func (d *Dispatcher) addNotices(out *storage.Outcome, ep *storage.Endpoint, job *storage.Job, dec Decision, change circuitChange, resumed bool, now time.Time) {
	add := func(n *storage.Notice) {
		if n != nil {
			out.Notices = append(out.Notices, *n)
		}
	}
	if out.State == storage.StateFailed {
		add(d.deliveryFailed(ep, job, out.Attempt, out.CountAttempt, failedReason(dec), now))
	}
	switch {
	case dec.Verdict == VerdictDisable:
	case change.opened:
		add(d.circuitOpened(ep, out.Attempt, d.cfg.CircuitFailures, change.until, now))
	case change.closed:
		add(d.circuitClosed(ep, now))
	case !out.Circuit:
	case dec.Verdict != VerdictSucceeded:
		end := out.Attempt.At.Add(out.Attempt.Latency)
		out.CircuitOpened = d.circuitOpened(ep, out.Attempt, d.cfg.CircuitFailures, end.Add(d.cfg.CircuitCooldown), end)
	case resumed:
		out.CircuitClosed = d.circuitClosed(ep, out.Attempt.At.Add(out.Attempt.Latency))
	}
}

// complete writes an outcome in one store write, wakes the recipients of
// its notices, and reports whether the store kept it.
func (d *Dispatcher) complete(ep *storage.Endpoint, job *storage.Job, out *storage.Outcome, dec Decision) bool {
	att := out.Attempt
	ctx, cancel := d.writeContext()
	defer cancel()
	err := d.cfg.Store.Complete(ctx, out)
	log := d.log.With("endpoint", ep.ID, "delivery", job.Delivery.ID, "attempt", att.N,
		"status", att.StatusCode, "verdict", dec.Verdict.String())
	switch {
	case errors.Is(err, storage.ErrLeaseLost):
		log.Debug("attempt outcome dropped: claim lost (lease expired, retried or cancelled)")
	case err != nil:
		log.Error("record attempt", "err", err)
	default:
		logAttempt(log, dec, att)
		for i := range out.Notices {
			d.NotifyNotice(&out.Notices[i])
		}
		d.NotifyNotice(out.CircuitOpened, out.CircuitClosed) // whichever was stored
	}
	return err == nil
}

// logAttempt logs a recorded attempt: failures that end a delivery are
// warnings, everything else is debug.
func logAttempt(log *slog.Logger, dec Decision, att storage.Attempt) {
	switch dec.Verdict {
	case VerdictFailed, VerdictDisable:
		log.Warn("delivery failed", "error", att.Error)
	case VerdictRetry:
		log.Debug("attempt failed, will retry", "error", att.Error, "next_attempt_at", dec.NextAttemptAt)
	default:
		log.Debug("delivered", "latency", att.Latency)
	}
}

// release returns an abandoned attempt's claim: pending, due now, and no
// attempt counted (the endpoint may have received it; delivery is at least
// once and the Idempotency-Key lets it deduplicate).
func (d *Dispatcher) release(job *storage.Job) {
	ctx, cancel := d.writeContext()
	defer cancel()
	err := d.cfg.Store.Release(ctx, []string{job.Delivery.ID}, job.Delivery.LeaseUntil, d.cfg.Now())
	if err != nil {
		d.log.Warn("release claim; it returns when its lease expires", "delivery", job.Delivery.ID, "err", err)
	}
}

// releaseAll returns claimed deliveries to pending, unsent, due at due
// (zero: as each was before its claim).
func (d *Dispatcher) releaseAll(jobs []storage.Job, due time.Time) {
	ds := make([]storage.Delivery, len(jobs))
	for i := range jobs {
		ds[i] = jobs[i].Delivery
	}
	ctx, cancel := d.writeContext()
	defer cancel()
	for _, g := range storage.LeaseGroups(ds) {
		if err := d.cfg.Store.Release(ctx, g.IDs, g.Lease, due); err != nil {
			d.log.Warn("release claims; they return when their lease expires", "deliveries", len(g.IDs), "err", err)
		}
	}
}

// expire fails a claimed delivery unsent, with an attempt that says why.
func (d *Dispatcher) expire(ep *storage.Endpoint, job *storage.Job, now time.Time, reason string) {
	out := &storage.Outcome{
		Delivery: job.Delivery.ID,
		Lease:    job.Delivery.LeaseUntil,
		Attempt:  storage.Attempt{N: job.Delivery.AttemptCount + 1, At: now, Error: reason},
		State:    storage.StateFailed, Interval: job.Delivery.Interval, CountAttempt: true,
	}
	n := d.deliveryFailed(ep, job, out.Attempt, true, ReasonExpired, now)
	if n != nil {
		out.Notices = []storage.Notice{*n}
	}
	ctx, cancel := d.writeContext()
	defer cancel()
	if err := d.cfg.Store.Complete(ctx, out); err != nil {
		if !errors.Is(err, storage.ErrLeaseLost) {
			// Left claimed: due again when its lease ends.
			d.log.Error("record a delivery failed", "endpoint", ep.ID, "delivery", job.Delivery.ID, "err", err)
		}
		return
	}
	d.cfg.Metrics.Expired(ep.ID)
	d.NotifyNotice(n)
	d.log.Warn("delivery failed", "endpoint", ep.ID, "delivery", job.Delivery.ID, "error", reason)
}

// cancelForeign cancels, unsent, a delivery whose endpoint id now names
// another tenant's endpoint. Endpoint ids are global: once a tenant
// deletes an endpoint, another may create one with the same id, and a
// delivery written for the old one (an ingest or replay that raced the
// delete, a retry) must never carry its event across tenants. Nothing
// counts against the endpoint's circuit.
func (d *Dispatcher) cancelForeign(ep *storage.Endpoint, job *storage.Job) {
	out := &storage.Outcome{
		Delivery: job.Delivery.ID,
		Lease:    job.Delivery.LeaseUntil,
		Attempt: storage.Attempt{N: job.Delivery.AttemptCount + 1, At: d.cfg.Now(),
			Error: "not sent: the endpoint id now names an endpoint of another tenant"},
		State: storage.StateCancelled,
	}
	ctx, cancel := d.writeContext()
	defer cancel()
	err := d.cfg.Store.Complete(ctx, out)
	if err != nil && !errors.Is(err, storage.ErrLeaseLost) {
		d.log.Error("cancel a delivery for another tenant's endpoint", "delivery", job.Delivery.ID, "err", err)
		return
	}
	d.log.Warn("delivery cancelled unsent: its endpoint id now belongs to another tenant",
		"endpoint", ep.ID, "delivery", job.Delivery.ID)
}

// stateOf is the delivery state a verdict leads to.
func stateOf(v Verdict) storage.DeliveryState {
	switch v {
	case VerdictSucceeded:
		return storage.StateSucceeded
	case VerdictRetry:
		return storage.StatePending
	}
	return storage.StateFailed
}

// joinError appends a note to an attempt's error text.
func joinError(err, note string) string {
	if err == "" {
		return note
	}
	return err + "; " + note
}
