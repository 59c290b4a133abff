package outbound

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"hookgate/storage"
)

// Dispatcher defaults, for the zero fields of Config.
const (
	DefaultLease              = time.Minute
	DefaultTimeout            = 15 * time.Second
	DefaultPoll               = time.Second
	DefaultCircuitFailures    = 5
	DefaultCircuitCooldown    = 5 * time.Second
	DefaultCircuitMaxCooldown = 5 * time.Minute
	DefaultMaxInFlight        = 10
	// MaxMaxInFlight bounds an endpoint's max_in_flight (config and the
	// admin API refuse more; one stored before is capped when sent): each
	// slot can hold a connection and a goroutine open for a whole timeout,
	// and a tenant's token sets it for an endpoint of its own.
	MaxMaxInFlight = 10_000
	DefaultVersion = "dev"
)

// Internal timings.
const (
	// leaseMargin is how much longer than its timeout an attempt's claim
	// lasts, to leave time for writing the outcome.
	leaseMargin = 30 * time.Second
	// storeWriteTimeout bounds the wait to queue an outcome or a release
	// write. It is not derived from the dispatcher's contexts, so a
	// shutdown still records the attempts that finished.
	storeWriteTimeout = 10 * time.Second
)

// Queue is the part of the store's outbox the dispatcher works from.
type Queue interface {
	Claim(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration) ([]storage.Job, error)
	NextDue(ctx context.Context, endpoint string) (due time.Time, ok bool, err error)
	Complete(ctx context.Context, out *storage.Outcome) error
	Release(ctx context.Context, ids []string, lease time.Time, due time.Time) error
	EndpointHold(ctx context.Context, endpoint string, now time.Time) (until time.Time, url string, err error)
}

// EndpointWriter changes a stored endpoint: the dispatcher disables one
// that answers 410 Gone, with the operational event that says so
// (storage.Catalog.ChangeEndpoint).
type EndpointWriter interface {
	UpdateEndpoint(ctx context.Context, id string, fn func(*storage.Endpoint) error) (storage.Endpoint, error)
	ChangeEndpoint(ctx context.Context, id string, fn func(*storage.Endpoint) (*storage.Notice, error)) (storage.Endpoint, error)
}

// Store is everything the dispatcher needs from storage.
type Store interface {
	Queue
	EndpointWriter
}

var _ Store = storage.Store(nil)

// Metrics receives delivery measurements. Every method must be safe for
// concurrent use and must not block.
type Metrics interface {
	// Attempt is called after each attempt whose outcome was decided, with
	// its verdict and its latency (send to end of the response excerpt).
	Attempt(endpoint string, v Verdict, latency time.Duration)
	// Delivered is called when a delivery succeeds, with the time from the
	// event's receipt to the success.
	Delivered(endpoint string, sinceIngest time.Duration)
	// InFlight is called when an endpoint's in-flight attempts change by delta.
	InFlight(endpoint string, delta int)
	// Expired is called when a delivery fails unsent: its max_elapsed
	// passed while its endpoint was paused.
	Expired(endpoint string)
}

// Config configures a Dispatcher. Zero fields take the defaults above.
type Config struct {
	// Store is the persistent outbox (required).
	Store Store
	// Client sends the requests; nil = NewClient(false).
	Client *http.Client
	// Version goes into the User-Agent: hookgate/<Version>.
	Version string
	// Lease is how long a claim is held at least; it must exceed
	// DefaultTimeout (unset: DefaultLease, or longer than DefaultTimeout).
	// An endpoint with a longer timeout gets a longer lease.
	Lease time.Duration
	// DefaultTimeout bounds an attempt to an endpoint without a timeout.
	DefaultTimeout time.Duration
	// Poll is the longest an idle endpoint waits before looking at its
	// outbox again; Notify and due times usually wake it sooner.
	Poll time.Duration
	// CircuitFailures is how many consecutive failed attempts pause an
	// endpoint.
	CircuitFailures int
	// CircuitCooldown is the first pause; each failed probe doubles it.
	CircuitCooldown time.Duration
	// CircuitMaxCooldown caps the doubling pauses.
	CircuitMaxCooldown time.Duration
	// Logger receives the dispatcher's logs; nil = slog.Default().
	Logger *slog.Logger
	// Metrics receives measurements; nil = none.
	Metrics Metrics
	// OnDisable, when set, is called after an endpoint was disabled and
	// persisted because it answered 410 Gone, so the caller can update its
	// own view of the endpoints (ingest stops creating deliveries for it).
	OnDisable func(ep storage.Endpoint)
	// Gates, when set, is a store shared by several gateways that keeps
	// the endpoints' rate_limit tokens, circuit breakers and receivers'
	// pauses itself (usually Store itself). The dispatcher then keeps none
	// of them in memory: each claim passes through the store's, so that
	// they hold across the gateways together.
	Gates storage.Gates
	// AlertEndpoint, when set, is the id of an endpoint (of tenant "",
	// among the dispatcher's endpoints) that receives every tenant's
	// operational events (NoticePayload), whatever its event_types; its
	// deliveries carry its tenant. None is ever raised about it.
	AlertEndpoint string
	// OnNotice, when set, is called with the recipients of operational
	// events once they are stored, after this dispatcher's loops are
	// woken: several gateways on one store wake each other's too.
	OnNotice func(endpoints []string)
	// Now is the clock; nil = time.Now. Tests only.
	Now func() time.Time
}

// withDefaults validates cfg and fills its zero fields.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Store == nil {
		return cfg, errors.New("outbound: Config.Store is required")
	}
	cfg.Version = cmp.Or(cfg.Version, DefaultVersion)
	cfg.DefaultTimeout = cmp.Or(cfg.DefaultTimeout, DefaultTimeout)
	cfg.Lease = cmp.Or(cfg.Lease, max(DefaultLease, cfg.DefaultTimeout+leaseMargin))
	cfg.Poll = cmp.Or(cfg.Poll, DefaultPoll)
	cfg.CircuitFailures = cmp.Or(cfg.CircuitFailures, DefaultCircuitFailures)
	cfg.CircuitCooldown = cmp.Or(cfg.CircuitCooldown, DefaultCircuitCooldown)
	cfg.CircuitMaxCooldown = cmp.Or(cfg.CircuitMaxCooldown, DefaultCircuitMaxCooldown)
	cfg.CircuitMaxCooldown = max(cfg.CircuitMaxCooldown, cfg.CircuitCooldown)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case cfg.Lease < 0 || cfg.DefaultTimeout < 0 || cfg.Poll < 0 || cfg.CircuitFailures < 0 || cfg.CircuitCooldown < 0:
		return cfg, errors.New("outbound: negative Config value")
	case cfg.Lease <= cfg.DefaultTimeout:
		return cfg, fmt.Errorf("outbound: Lease (%s) must exceed DefaultTimeout (%s)", cfg.Lease, cfg.DefaultTimeout)
	}
	return cfg, nil
}

// noMetrics drops every measurement.
type noMetrics struct{}

func (noMetrics) Attempt(string, Verdict, time.Duration) {}
func (noMetrics) Delivered(string, time.Duration)        {}
func (noMetrics) InFlight(string, int)                   {}
func (noMetrics) Expired(string)                         {}

// lifecycle is where a Dispatcher is between New and Stop.
type lifecycle int

const (
	lifecycleNew lifecycle = iota
	lifecycleRunning
	lifecycleStopped
)

// Dispatcher delivers the outbox: one loop per endpoint claims due
// deliveries (bounded by max_in_flight, rate_limit and the endpoint's
// circuit), sends each claimed delivery in its own goroutine and writes
// the outcome back. Nothing pending lives only in memory: a delivery is
// claimed under a lease, and if the process dies the lease expires and the
// delivery is due again.
type Dispatcher struct {
	cfg       Config
	ownClient bool // the client was made here: Stop closes its idle connections
	log       *slog.Logger
	sender    *sender

	mu        sync.RWMutex
	state     lifecycle
	endpoints map[string]*endpointLoop
	// subsMu guards subs, the loops of the endpoints that may receive
	// operational events, by tenant (the alert endpoint under its id's
	// key, noticeAll): nil until asked, again after an endpoint changes
	// (under mu), so that a burst of notices (a backlog expiring) does
	// not look through every endpoint for each.
	subsMu sync.Mutex
	subs   map[string][]*endpointLoop
	// claimCtx ends first on Stop: loops stop claiming. attemptCtx ends
	// after the grace period: in-flight attempts are abandoned.
	claimCtx, attemptCtx         context.Context
	cancelClaims, cancelAttempts context.CancelFunc

	loops   sync.WaitGroup // endpoint loop goroutines
	jobs    sync.WaitGroup // attempt goroutines
	cut     atomic.Int64   // attempts a shutdown abandoned
	stopped chan struct{}  // closed when Stop has finished
}

// New validates cfg and returns a Dispatcher that is not started yet.
func New(cfg Config) (*Dispatcher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ownClient := cfg.Client == nil
	if ownClient {
		cfg.Client = NewClient(false)
	}
	return &Dispatcher{
		cfg:       cfg,
		ownClient: ownClient,
		log:       cfg.Logger.With("component", "outbound"),
		sender: &sender{
			client:    cfg.Client,
			userAgent: "hookgate/" + cfg.Version,
			timeout:   cfg.DefaultTimeout,
			now:       cfg.Now,
		},
		endpoints: make(map[string]*endpointLoop),
		stopped:   make(chan struct{}),
	}, nil
}

// Start starts one loop per endpoint and returns at once. Cancelling ctx is
// a hard stop (in-flight attempts are abandoned and their claims released);
// Stop is the graceful one, and must be called in either case to wait for
// the goroutines. Start after Start or Stop does nothing.
func (d *Dispatcher) Start(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != lifecycleNew {
		return
	}
	d.state = lifecycleRunning
	d.claimCtx, d.cancelClaims = context.WithCancel(ctx)
	d.attemptCtx, d.cancelAttempts = context.WithCancel(ctx)
	for _, l := range d.endpoints {
		d.startLoop(l)
	}
}

// Stop shuts the dispatcher down and blocks until every goroutine it
// started has returned. It is idempotent; a concurrent call waits too.
//
// Shutdown order:
//  1. stop claiming: cancel the claim context and wait for every endpoint
//     loop to return, so no attempt starts after this point;
//  2. let the in-flight attempts finish and record their outcomes, for at
//     most grace;
//  3. cancel the attempts still running: each releases its claim (pending,
//     due now, no attempt counted), so the next start sends it at once;
//  4. wait for every attempt goroutine;
//  5. close the idle connections of a client the dispatcher made.
func (d *Dispatcher) Stop(grace time.Duration) {
	d.mu.Lock()
	prev := d.state
	d.state = lifecycleStopped
	d.mu.Unlock()
	switch prev {
	case lifecycleStopped:
		<-d.stopped
		return
	case lifecycleRunning:
		d.cancelClaims()
		d.loops.Wait()
		d.drain(grace)
	}
	if d.ownClient {
		d.cfg.Client.CloseIdleConnections()
	}
	close(d.stopped)
}

// drain waits up to grace for the in-flight attempts, then cancels the
// rest and waits for them to release their claims.
func (d *Dispatcher) drain(grace time.Duration) {
	idle := make(chan struct{})
	go func() {
		d.jobs.Wait()
		close(idle)
	}()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-idle:
	case <-timer.C:
		d.cancelAttempts()
		<-idle
		if n := d.cut.Load(); n > 0 {
			d.log.Warn("grace period over: delivery attempts still in flight were cut; they are sent again after the restart, with the same Idempotency-Key",
				"attempts", n)
		}
	}
	d.cancelAttempts()
}

// SetEndpoints replaces the endpoint set: loops of endpoints no longer in
// eps stop claiming (their in-flight attempts finish), new ones start, and
// the others take the new settings. A disabled endpoint claims nothing.
func (d *Dispatcher) SetEndpoints(eps []storage.Endpoint) {
	keep := make(map[string]bool, len(eps))
	for _, ep := range eps {
		keep[ep.ID] = true
		d.UpsertEndpoint(ep)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.endpoints {
		if !keep[id] {
			d.removeLocked(id)
		}
	}
}

// UpsertEndpoint adds an endpoint or changes one. A change applies to the
// next claim; attempts in flight finish with the settings they started
// with.
func (d *Dispatcher) UpsertEndpoint(ep storage.Endpoint) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.forgetSubscribers()
	if l, ok := d.endpoints[ep.ID]; ok {
		l.update(ep)
		l.poke()
		return
	}
	l := newEndpointLoop(d, ep)
	d.endpoints[ep.ID] = l
	if d.state == lifecycleRunning {
		d.startLoop(l)
	}
}

// RemoveEndpoint stops delivering to an endpoint. Its in-flight attempts
// finish; its pending deliveries stay in the store (the caller cancels
// them with the store's CancelEndpoint when the endpoint is deleted).
func (d *Dispatcher) RemoveEndpoint(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.removeLocked(id)
}

func (d *Dispatcher) removeLocked(id string) {
	if l, ok := d.endpoints[id]; ok {
		d.forgetSubscribers()
		delete(d.endpoints, id)
		l.removed.Store(true)
		if l.cancel != nil {
			l.cancel()
		}
	}
}

// RetryNow resumes the endpoint and pokes its loop: an operator's "deliver
// again now" (POST /deliveries/{id}/retry) is sent now, as SPEC says, even
// while the receiver asked for a pause (a Retry-After hold) or its circuit
// is open after failures. The operator says the receiver is back, as a
// re-enable does: the circuit closes, the hold ends, and the endpoint's
// other due deliveries go out with it.
//
// An open circuit closed so is the endpoint's recovery: it raises
// hookgate.endpoint.recovered, reason operator (its success would not: the
// circuit is closed by then).
func (d *Dispatcher) RetryNow(endpointID string) {
	d.mu.RLock()
	l, ok := d.endpoints[endpointID]
	var ep storage.Endpoint
	wasOpen := false
	if ok {
		l.mu.Lock()
		ep, wasOpen = l.ep, l.circuit.state != circuitClosed
		l.resume()
		l.mu.Unlock()
		l.poke()
	}
	d.mu.RUnlock()
	if d.cfg.Gates != nil {
		ctx, cancel := d.writeContext()
		var err error
		wasOpen, err = d.cfg.Gates.ResumeEndpoint(ctx, endpointID)
		cancel()
		if err != nil {
			d.log.Error("resume the endpoint for every gateway", "endpoint", endpointID, "err", err)
		}
	}
	if !ok || !wasOpen {
		return
	}
	ctx, cancel := d.writeContext()
	defer cancel()
	// Stored with an unchanged endpoint: the write that carries a notice
	// outside an outcome.
	n := d.EndpointNotice(ep, NoticeEndpointRecovered, ReasonOperator, d.cfg.Now())
	if n == nil {
		return
	}
	if _, err := d.cfg.Store.ChangeEndpoint(ctx, endpointID, func(*storage.Endpoint) (*storage.Notice, error) { return n, nil }); err != nil {
		d.log.Error("store the endpoint's recovery", "endpoint", endpointID, "err", err)
		return
	}
	d.NotifyNotice(n)
}

// Pause is an endpoint's pause as this gateway sees it: "closed" when it
// sends, "open" or "half-open" for its circuit after failures, "paused"
// while its receiver's Retry-After holds (or, on a store that keeps the
// gates, while they pause it), with until when. ok is false for an
// endpoint the dispatcher does not have.
type Pause struct {
	State string
	Until time.Time
}

// EndpointPause reports an endpoint's Pause at now.
func (d *Dispatcher) EndpointPause(endpointID string, now time.Time) (Pause, bool) {
	d.mu.RLock()
	l, ok := d.endpoints[endpointID]
	d.mu.RUnlock()
	if !ok {
		return Pause{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case d.cfg.Gates != nil && now.Before(l.gateUntil):
		return Pause{State: "paused", Until: l.gateUntil}, true
	case d.cfg.Gates != nil:
		return Pause{State: "closed"}, true
	case l.held(now):
		return Pause{State: "paused", Until: l.hold}, true
	case l.circuit.state == circuitOpen:
		return Pause{State: "open", Until: l.circuit.until}, true
	}
	return Pause{State: l.circuit.state.String()}, true
}

// circuitPolicy is the circuit breaker's settings, for a store that keeps
// the circuit (Gates).
func (d *Dispatcher) circuitPolicy() storage.CircuitPolicy {
	return storage.CircuitPolicy{Failures: d.cfg.CircuitFailures, Cooldown: d.cfg.CircuitCooldown, MaxCooldown: d.cfg.CircuitMaxCooldown}
}

// Notify wakes the loops of the given endpoints (every endpoint when none
// is given) so that new deliveries go out within milliseconds instead of
// at the next poll. It never blocks.
func (d *Dispatcher) Notify(endpointIDs ...string) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if len(endpointIDs) == 0 {
		for _, l := range d.endpoints {
			l.poke()
		}
		return
	}
	for _, id := range endpointIDs {
		if l, ok := d.endpoints[id]; ok {
			l.poke()
		}
	}
}

// startLoop runs an endpoint's loop until the claim context ends or the
// endpoint is removed. Called with d.mu held and the dispatcher running.
func (d *Dispatcher) startLoop(l *endpointLoop) {
	ctx, cancel := context.WithCancel(d.claimCtx)
	l.cancel = cancel
	d.loops.Add(1)
	go func() {
		defer d.loops.Done()
		defer cancel()
		l.run(ctx)
	}()
}

// leaseFor is how long a claim on ep lasts: longer than any attempt.
func (d *Dispatcher) leaseFor(ep *storage.Endpoint) time.Duration {
	return min(storage.MaxLease, max(d.cfg.Lease, cmp.Or(ep.Timeout, d.cfg.DefaultTimeout)+leaseMargin))
}

// errAlreadyDisabled stops an update of an endpoint already disabled (or
// no longer the one an attempt was sent to).
var errAlreadyDisabled = errors.New("endpoint already disabled")

// sameTarget reports whether a and b are the same endpoint at the same URL.
// Not merely the same id: ids are global and may be reused after a delete.
// And the same URL: a 410 Gone says that one URL is gone, not the one the
// endpoint was moved to while the attempt was in flight.
func sameTarget(a, b *storage.Endpoint) bool {
	return a.ID == b.ID && a.Tenant == b.Tenant && a.CreatedAt.Equal(b.CreatedAt) && a.URL == b.URL
}

// disable persists an endpoint as disabled after it answered 410 Gone to
// an attempt sent to sent. The loop stops claiming at once; the store
// write follows. Only the disabled fields change, on the endpoint as
// stored: an operator's change that the loop has not heard of yet (a
// rotated secret) is kept. A 410 of an endpoint deleted meanwhile, whose
// id now names another (maybe another tenant's), or moved to another URL,
// disables nothing.
func (d *Dispatcher) disable(l *endpointLoop, sent *storage.Endpoint, reason string) {
	now := d.cfg.Now()
	if !l.markDisabled(sent, reason, now) {
		return
	}
	ctx, cancel := d.writeContext()
	defer cancel()
	// Built before the write: fn runs inside the store's.
	n := d.noticeAbout(sent, NoticePayload{Type: NoticeEndpointDisabled, Reason: ReasonGone,
		LastStatus: http.StatusGone, LastError: reason, DisabledAt: noticeTime(now)}, now)
	ep, err := d.cfg.Store.ChangeEndpoint(ctx, l.id, func(ep *storage.Endpoint) (*storage.Notice, error) {
		if ep.Disabled || !sameTarget(ep, sent) {
			return nil, errAlreadyDisabled
		}
		ep.Disabled, ep.DisabledReason, ep.UpdatedAt = true, reason, now
		return n, nil
	})
	switch {
	case errors.Is(err, errAlreadyDisabled), errors.Is(err, storage.ErrNotFound):
		return // disabled or deleted meanwhile: nothing to persist
	case err != nil:
		d.log.Error("persist disabled endpoint", "endpoint", l.id, "err", err)
		return
	}
	d.log.Warn("endpoint disabled", "endpoint", ep.ID, "reason", reason)
	d.NotifyNotice(n)
	if d.cfg.OnDisable != nil {
		d.cfg.OnDisable(ep)
	}
}

// writeContext is the context of a store write that must happen even
// during shutdown (an outcome, a release).
func (d *Dispatcher) writeContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(d.attemptCtx), storeWriteTimeout)
}
