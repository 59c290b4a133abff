// Package storage says what hookgate's store promises, independently of the
// engine behind it. The embedded engine is storage/badger; a Postgres engine
// for running several gateways will implement the same interfaces and pass
// the same conformance suite (storage/storagetest).
//
// The store is deliberately dumb about webhooks: callers build records
// (events, deliveries, responses) and the store makes them durable
// atomically. Every write that returns nil is on disk (fsynced).
package storage

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Sentinel errors a caller branches on.
var (
	// ErrNotFound is returned when a record does not exist (or is not visible
	// to the tenant asking for it).
	ErrNotFound = errors.New("not found")
	// ErrIdempotencyMismatch is returned when an idempotency key (an inbound
	// event ID or an admin Idempotency-Key) is reused with a different request.
	ErrIdempotencyMismatch = errors.New("idempotency key reused with a different request")
	// ErrLeaseLost is returned when a worker writes the outcome of a claim it
	// no longer holds: its lease expired and the record moved on.
	ErrLeaseLost = errors.New("lease lost")
	// ErrClosed is returned by every method once the store is closed.
	ErrClosed = errors.New("store closed")
	// ErrConflict is returned when a change conflicts with a record's
	// state (Retry of a delivery that is cancelled or being delivered).
	ErrConflict = errors.New("already exists")
	// ErrBadCursor is returned for a pagination cursor the store did not make.
	ErrBadCursor = errors.New("invalid cursor")
)

// Store is everything hookgate needs from a storage engine. Consumers should
// depend on the narrowest interface they use.
type Store interface {
	Ingester
	Outbox
	Catalog
	Inspector
	Idempotency
	Replays
	Maintainer
	// Ping reports whether the store is open and writable.
	Ping(ctx context.Context) error
	// Close flushes and closes the store. It is safe to call more than once.
	Close() error
}

// Ingester records inbound events.
type Ingester interface {
	// Ingest stores an event and its deliveries in one durable write, unless
	// the dedupe key is already known: then it returns the stored response
	// with Replayed set (same body hash) or ErrIdempotencyMismatch. The ids
	// of the event and its deliveries are new (NewID): a store need not
	// check that no record has them.
	Ingest(ctx context.Context, req *IngestRequest) (IngestResult, error)
	// Release is Outbox.Release: the ingest path gives back deliveries it
	// wrote claimed when the write failed after its commit (its sync), so
	// that they are due at once instead of after their lease.
	Release(ctx context.Context, ids []string, lease time.Time, due time.Time) error
}

// ErrStoreFailed is wrapped by the errors of an engine that can no longer
// guarantee that what it acknowledges is durable (a failed fsync: the
// kernel may have dropped the pages), until it is opened again. Nothing
// but a restart brings it back: the process should stop, and its
// supervisor start it again.
var ErrStoreFailed = errors.New("the store failed and must be reopened")

// MaxEventBody is the largest event body a store must keep and read back
// (server.max_body is at most this; GitHub, the largest sender, sends up
// to 25 MB).
const MaxEventBody = 32 << 20

// MaxClaim is the most deliveries one Claim must be able to take: an
// endpoint's max_in_flight may be larger, and is then claimed in parts.
const MaxClaim = 1024

// MaxAttemptTimeout bounds a delivery attempt's timeout (config refuses
// more; a longer one stored by an earlier build is cut to it).
const MaxAttemptTimeout = time.Hour

// MaxLease bounds a claim's lease: an attempt's timeout and a margin. A
// store looks this far ahead for the claims of a process that died (see
// Open's release of stale claims).
const MaxLease = MaxAttemptTimeout + time.Minute

// Gates is implemented by a store that several gateways share. It keeps
// an endpoint's rate_limit tokens, circuit breaker and Retry-After pause
// itself and applies them in the claim, so that they hold across all the
// gateways together: one gateway's open circuit or receiver's pause is
// every gateway's, and the endpoint's rate is the cluster's. A dispatcher
// on such a store keeps none of them in memory. (The embedded engine is
// one process's: its dispatcher keeps them itself.)
type Gates interface {
	// ClaimGated claims as Claim does, at most what the endpoint's gates
	// let through at now: its rate tokens, its circuit (none while open,
	// one probe when the cool-down is over) and its receiver's pause (none
	// while it lasts, if asked by the endpoint's current URL). With no
	// jobs, the GateWait says until when the gates hold; outcomes of the
	// jobs count for the circuit through Outcome.Circuit.
	ClaimGated(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration, policy CircuitPolicy) ([]Job, GateWait, error)
	// ResumeEndpoint closes an endpoint's circuit and ends its receiver's
	// pause: an operator says the receiver is back. wasOpen reports
	// whether the circuit was open (or half-open) before: its recovery is
	// then the operator's.
	ResumeEndpoint(ctx context.Context, endpoint string) (wasOpen bool, err error)
}

// CircuitPolicy is how an endpoint's circuit breaker opens and cools down.
type CircuitPolicy struct {
	// Failures is how many consecutive failed attempts open it.
	Failures int
	// Cooldown is the first pause; each failed probe doubles it, up to
	// MaxCooldown.
	Cooldown, MaxCooldown time.Duration
}

// GateWait is why a gated claim took nothing, and until when.
type GateWait struct {
	// Until is when the gates may let a delivery through; zero when they
	// did not hold (nothing was due).
	Until time.Time
	// Paused is true when the circuit is open or the receiver asked for a
	// pause, rather than a rate or max_in_flight limit: due deliveries
	// may pass their max_elapsed meanwhile.
	Paused bool
}

// Outbox is the persistent delivery queue.
type Outbox interface {
	// Claim leases up to limit deliveries of one endpoint that are due at
	// now (pending, or delivering with an expired lease), oldest due first.
	// An engine takes up to MaxClaim in one call, and may cap a larger
	// limit at that.
	Claim(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration) ([]Job, error)
	// NextDue returns when the earliest delivery of the endpoint becomes due
	// (a pending due time or a lease expiry), or an earlier time: it is a
	// hint for when to claim next, and a claim at that time may find
	// nothing. ok is false when the endpoint's outbox is empty; it may also
	// be true then, with a time at which nothing is due (Badger reports
	// the lease of a delivery that just finished).
	NextDue(ctx context.Context, endpoint string) (due time.Time, ok bool, err error)
	// Complete records one attempt and the delivery's new state in one write.
	// It fails with ErrLeaseLost unless the delivery is still held under
	// out.Lease.
	Complete(ctx context.Context, out *Outcome) error
	// EndpointHold returns the latest pause an endpoint's receiver asked
	// for (Outcome.Hold) and the URL that asked, if it lasts past now; a
	// zero until when there is none. A restart reads it, so that a
	// receiver's "not before" outlives the process.
	EndpointHold(ctx context.Context, endpoint string, now time.Time) (until time.Time, url string, err error)
	// Release returns claimed deliveries to pending, due at the given time,
	// without counting an attempt (shutdown, a paused endpoint). A zero due
	// keeps each delivery's due time from before its claim.
	Release(ctx context.Context, ids []string, lease time.Time, due time.Time) error
	// Enqueue adds deliveries of already stored events (replay), due at their
	// NextAttemptAt. Their ids are new (NewID), as in Ingest.
	Enqueue(ctx context.Context, ds []Delivery) error
	// Retry makes a delivery due again at now with a fresh retry budget,
	// whatever its state, but ErrConflict when it is cancelled or being
	// delivered (delivering, its lease not yet over at now). Its attempts
	// are kept.
	Retry(ctx context.Context, id string, now time.Time) (Delivery, error)
	// CancelEndpoint cancels every pending delivery of an endpoint (deleted).
	CancelEndpoint(ctx context.Context, endpoint string) (int, error)
	// QueuedEndpoints lists the ids of the endpoints that have live
	// deliveries (pending or claimed), each once: after a crash or a failed
	// CancelEndpoint, those of deleted endpoints are found again from it.
	QueuedEndpoints(ctx context.Context) ([]string, error)
	// Depth counts an endpoint's live deliveries (pending or claimed) and
	// how many of them are due at now, each counted up to limit (a gauge
	// needs no exact figure for a huge backlog, and counting is bounded).
	Depth(ctx context.Context, endpoint string, now time.Time, limit int) (live, due int, err error)
}

// Catalog keeps endpoints and sources.
type Catalog interface {
	PutEndpoint(ctx context.Context, ep *Endpoint) error
	// UpdateEndpoint changes a stored endpoint in one atomic step: it reads
	// the endpoint, applies fn to it and stores the result, with no other
	// write of that endpoint in between, and returns what was stored. An
	// error from fn aborts the update and is returned as is (nothing is
	// written); ErrNotFound when there is no such endpoint. fn may be
	// called more than once, so it must only change the endpoint.
	UpdateEndpoint(ctx context.Context, id string, fn func(*Endpoint) error) (Endpoint, error)
	// ChangeEndpoint is UpdateEndpoint that also stores the Notice fn
	// returns (nil: none) in the same write as the endpoint: an endpoint
	// disabled and the operational event that says so are both stored or
	// neither. fn may be called more than once; the notice of its last call
	// is the one stored.
	ChangeEndpoint(ctx context.Context, id string, fn func(*Endpoint) (*Notice, error)) (Endpoint, error)
	GetEndpoint(ctx context.Context, id string) (Endpoint, error)
	ListEndpoints(ctx context.Context) ([]Endpoint, error)
	DeleteEndpoint(ctx context.Context, id string) error
	PutSource(ctx context.Context, src *Source) error
	GetSource(ctx context.Context, id string) (Source, error)
	ListSources(ctx context.Context) ([]Source, error)
	DeleteSource(ctx context.Context, id string) error
}

// Inspector reads events, deliveries and attempts for the admin API.
// Listings page newest first (by id, descending: ids are made by NewID,
// so they sort by time); an engine may end a page short, even empty,
// with a next cursor, to bound the records one call reads when a filter
// matches few of them. The last page is the one without a cursor.
// ListEvents also ends a page short, with a cursor, before the bodies
// and headers of its events pass PageBytes (a page holds at least one
// event): a page of large bodies is otherwise up to a GiB in memory.
type Inspector interface {
	GetEvent(ctx context.Context, id string) (Event, error)
	ListEvents(ctx context.Context, f EventFilter) ([]Event, string, error)
	GetDelivery(ctx context.Context, id string) (Delivery, error)
	ListDeliveries(ctx context.Context, f DeliveryFilter) ([]Delivery, string, error)
	ListAttempts(ctx context.Context, delivery string) ([]Attempt, error)
}

// Idempotency backs the Idempotency-Key header of admin POSTs.
type Idempotency interface {
	// ClaimKey atomically claims (tenant, key) for a request with the given
	// hash. See IdemState for the outcomes.
	ClaimKey(ctx context.Context, c IdemClaim) (IdemResult, error)
	// FinishKey stores the response of a claimed key until expiry. lease
	// is the claim's LeaseUntil (from IdemNew): if the key is no longer
	// held under it (the lease ran out and another request took the key),
	// nothing is stored and the error is ErrLeaseLost.
	FinishKey(ctx context.Context, tenant, key string, lease time.Time, resp Response, expires time.Time) error
	// AbandonKey ends a claim whose request failed (a 5xx, which may follow
	// a write that was stored all the same), so that a retry of the same
	// request executes it again at once. Until the claim's Remember the key
	// stays that request's: another request under it is IdemMismatch, as
	// it is for a claim whose lease ran out. A claim no longer held under
	// lease is left alone (ErrLeaseLost).
	AbandonKey(ctx context.Context, tenant, key string, lease time.Time) error
}

// Replays keeps bulk replay jobs.
type Replays interface {
	// CreateReplay writes a new job; ErrConflict if one has its id (a
	// job id derived from an admin Idempotency-Key use is written once,
	// whichever run of the request writes it first).
	CreateReplay(ctx context.Context, job *ReplayJob) error
	// PutReplay writes a job, new or not.
	PutReplay(ctx context.Context, job *ReplayJob) error
	// EnqueueReplay adds deliveries of stored events, as Enqueue does, and
	// writes job (a bulk replay's progress) in the same write: both or
	// neither, so that a job stopped or killed anywhere resumes exactly
	// after what it stored. ds may be empty.
	EnqueueReplay(ctx context.Context, job *ReplayJob, ds []Delivery) error
	GetReplay(ctx context.Context, id string) (ReplayJob, error)
	ListReplays(ctx context.Context, state ReplayState) ([]ReplayJob, error)
}

// Maintainer removes what has outlived retention.
type Maintainer interface {
	// Purge deletes events received before cutoff, with their deliveries and
	// attempts, at most limit events per call. It returns how many it deleted.
	// An event with a live delivery whose retry budget (RetryFrom) started
	// at or after cutoff, or at or after liveCutoff (the gateway passes now
	// minus its endpoints' longest retry window, when that is longer than
	// retention), is kept until that delivery finishes. It returns fewer
	// than limit only when it has gone through every event before cutoff
	// (an event kept earlier whose delivery has finished since waits for a
	// later call).
	Purge(ctx context.Context, cutoff, liveCutoff time.Time, limit int) (int, error)
	// PurgeReplays deletes the finished (completed or failed) replay jobs
	// last updated before cutoff, and returns how many. A running job is
	// kept, however old.
	PurgeReplays(ctx context.Context, cutoff time.Time) (int, error)
}

// Cluster is implemented by engines that several gateways share (the
// Postgres engine): what one gateway must learn of another's work, and
// locks that make background work run once across them. An embedded
// engine, owned by one process, has neither need.
type Cluster interface {
	// CatalogVersion changes whenever any gateway writes or deletes an
	// endpoint or a source; a gateway that sees it change reloads its
	// view of the catalog.
	CatalogVersion(ctx context.Context) (int64, error)
	// TryLock takes the cluster-wide lock name if no one holds it, and
	// reports whether it did. The lock is held until unlock is called or
	// the holder's connection to the store ends (it died), whichever
	// comes first: lost reports the latter, so that the holder stops the
	// work the lock guarded.
	TryLock(ctx context.Context, name string) (unlock func(), lost <-chan struct{}, ok bool, err error)
	// Lock is TryLock that waits (until ctx ends) for the lock to be free.
	Lock(ctx context.Context, name string) (unlock func(), lost <-chan struct{}, err error)
	// Announce tells the other gateways, soon, that the endpoints have new
	// deliveries due, so that they claim at once rather than at their next
	// poll. It never blocks. An announcement is a hint and may be lost:
	// the poll is the fallback.
	Announce(endpoints ...string)
	// Listen calls fn with the endpoints other gateways announce, until
	// ctx ends or the store's connection for it fails; it returns why, and
	// the caller listens again.
	Listen(ctx context.Context, fn func(endpoints []string)) error
}

// SyncReporter is implemented by engines that make writes durable in
// groups, with one sync (fsync) for many writes. The gateway exports it as
// metrics: sync latency is what a durable write waits for, and a device
// busy with other writes shows there first.
type SyncReporter interface {
	// SyncStats returns counts since the store was opened.
	SyncStats() SyncStats
}

// SyncBounds are the upper bounds, in seconds, of SyncStats.Buckets.
var SyncBounds = [...]float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

// SyncStats counts syncs, Prometheus-histogram style.
type SyncStats struct {
	// Syncs is how many syncs ran, Seconds their total duration.
	Syncs   uint64
	Seconds float64
	// Buckets[i] counts syncs that took at most SyncBounds[i] (cumulative).
	Buckets []uint64
	// Writes is how many write operations (durable write calls) the
	// syncs completed.
	Writes uint64
}

// DedupeKey names one logical inbound event: dedupe scope is (tenant, source).
type DedupeKey struct {
	Tenant  string
	Source  string
	EventID string
}

// Response is a stored HTTP answer, replayed byte for byte.
type Response struct {
	Status int    `json:"status"`
	Body   []byte `json:"body"`
}

// IngestRequest is one inbound event to record.
type IngestRequest struct {
	Key DedupeKey
	// BodyHash identifies the request for the same-ID-different-body check.
	BodyHash [32]byte
	// DedupeUntil is when the dedupe record expires.
	DedupeUntil time.Time
	Event       Event
	Deliveries  []Delivery
	// Response is what the first request is answered, stored for replays.
	Response Response
}

// IngestResult tells whether the request was new or a replay.
type IngestResult struct {
	Replayed bool
	Response Response
}

// Event is one accepted webhook, stored with its raw body.
type Event struct {
	ID             string            `json:"id"`
	Tenant         string            `json:"tenant"`
	Source         string            `json:"source"`
	EventID        string            `json:"event_id"`
	Type           string            `json:"type"`
	ReceivedAt     time.Time         `json:"received_at"`
	ContentType    string            `json:"content_type"`
	Headers        map[string]string `json:"headers"`
	Body           []byte            `json:"body"`
	IdempotencyKey string            `json:"idempotency_key"`
}

// DeliveryState is where a delivery is in its life.
type DeliveryState string

// Delivery states.
const (
	StatePending    DeliveryState = "pending"
	StateDelivering DeliveryState = "delivering"
	StateSucceeded  DeliveryState = "succeeded"
	StateFailed     DeliveryState = "failed"
	StateCancelled  DeliveryState = "cancelled"
)

// Terminal reports whether no further attempt will be made.
func (s DeliveryState) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled
}

// Delivery is one event on its way to one endpoint. Its retry state is data:
// attempt count, due time, lease and backoff interval live in the record.
// Its Tenant is its event's, but for a Notice's delivery to an operator's
// alert endpoint, which carries that endpoint's (""): a tenant's listing
// of deliveries does not show it. An event's state (StateOf) counts every
// delivery of it.
type Delivery struct {
	ID             string        `json:"id"`
	Event          string        `json:"event"`
	Tenant         string        `json:"tenant"`
	Endpoint       string        `json:"endpoint"`
	IdempotencyKey string        `json:"idempotency_key"`
	State          DeliveryState `json:"state"`
	AttemptCount   int           `json:"attempt_count"`
	CreatedAt      time.Time     `json:"created_at"`
	NextAttemptAt  time.Time     `json:"next_attempt_at"`
	// LeaseUntil is set while State is delivering: the claim's expiry.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// RetryFrom is when the current retry budget started (creation, or a
	// manual retry); max_elapsed counts from it.
	RetryFrom time.Time `json:"retry_from"`
	// RetryBase is AttemptCount when the current retry budget started: a
	// manual retry gets max_attempts new attempts, while attempt numbers
	// keep counting up.
	RetryBase int `json:"retry_base,omitempty"`
	// Interval is the current (unrandomized) backoff interval.
	Interval   time.Duration `json:"interval"`
	LastError  string        `json:"last_error,omitempty"`
	LastStatus int           `json:"last_status,omitempty"`
	UpdatedAt  time.Time     `json:"updated_at"`
}

// NewDeliveries builds one pending delivery of ev per endpoint, due now.
// Each carries its endpoint's tenant: the event's, but for an operator's
// alert endpoint (tenant ""), which gets every tenant's operational events.
func NewDeliveries(ev *Event, endpoints []Endpoint, now time.Time) []Delivery {
	if len(endpoints) == 0 {
		return nil
	}
	ds := make([]Delivery, len(endpoints))
	for i, ep := range endpoints {
		ds[i] = Delivery{
			ID: NewID("dlv_", now), Event: ev.ID, Tenant: ep.Tenant, Endpoint: ep.ID,
			IdempotencyKey: ev.IdempotencyKey, State: StatePending,
			CreatedAt: now, NextAttemptAt: now, RetryFrom: now, UpdatedAt: now,
		}
	}
	return ds
}

// Job is a claimed delivery with the event it carries.
type Job struct {
	Delivery Delivery
	Event    Event
}

// Attempt is the record of one try.
type Attempt struct {
	N          int           `json:"n"`
	At         time.Time     `json:"at"`
	StatusCode int           `json:"status_code"`
	Latency    time.Duration `json:"latency"`
	Error      string        `json:"error,omitempty"`
	Response   string        `json:"response,omitempty"`
}

// Outcome is the result of one attempt and the state it leads to.
type Outcome struct {
	Delivery string
	// Lease is the claim this outcome belongs to (Delivery.LeaseUntil at claim).
	Lease   time.Time
	Attempt Attempt
	// State is pending (retry at NextAttemptAt), succeeded or failed.
	State         DeliveryState
	NextAttemptAt time.Time
	Interval      time.Duration
	// CountAttempt is false when the attempt must not use the retry budget
	// (the endpoint was paused); the attempt record is still written.
	CountAttempt bool
	// Hold, when not zero, is when the endpoint may be sent to again: its
	// receiver, at HoldURL, asked for a pause (a 429 or 503 with
	// Retry-After). The store keeps the latest hold per endpoint, in the
	// same write, until it passes (Outbox.EndpointHold).
	Hold    time.Time
	HoldURL string
	// EndHold deletes the endpoint's stored hold in the same write: the
	// receiver takes deliveries again (an operator's retry went through).
	// The dispatcher sets it only when a hold may be stored, so that a
	// success costs the store no lookup.
	EndHold bool
	// Circuit says the attempt was sent to the endpoint as it is now: its
	// result counts for the endpoint's circuit breaker in a store that
	// keeps it (Gates). A success closes it; a failure counts.
	Circuit bool
	// Notices are operational events (and their deliveries) stored in the
	// same write as the outcome: all of them with it, or none when the
	// outcome is not stored (ErrLeaseLost, any error).
	Notices []Notice
	// CircuitOpened and CircuitClosed are for a store that keeps the
	// circuit (Gates), with Circuit set: it stores CircuitOpened in the
	// same write only if this outcome opens the endpoint's circuit from
	// closed (not when a failed probe opens it again), and CircuitClosed
	// only if it closes an open circuit (the probe's success). Prebuilt by
	// the dispatcher, which cannot know which outcome makes the change
	// when several gateways count into one circuit. A store without gates
	// ignores them: its dispatcher keeps the circuit and puts the notice
	// of a change in Notices.
	CircuitOpened, CircuitClosed *Notice
}

// Notice is an operational event of hookgate's own (Source "hookgate": a
// delivery failed, an endpoint was disabled or recovered), stored
// together with the state change it reports, in the tenant's event
// stream: a crash between the two cannot lose either. Its Deliveries
// (maybe none: the event is still stored, and lists as unmatched) go to
// the endpoints that subscribe to it, and may carry a Tenant other than
// the event's (an operator's alert endpoint, of tenant ""). No dedupe
// record is written: its event id is new and its EventID unique.
type Notice struct {
	Event      Event
	Deliveries []Delivery
}

// NoticeSource is the Source of the events of notices.
const NoticeSource = "hookgate"

// NoticeTypePrefix starts every operational event type.
const NoticeTypePrefix = "hookgate."

// WantsNotice reports whether event_types globs ask for operational
// events of type typ by name: a glob that starts with NoticeTypePrefix
// and matches it. Only such a glob lets an operational event through
// ("*" and an empty list do not: no endpoint receives them unasked), and
// such a glob lets nothing else through (a provider's event of a
// "hookgate." type is not one).
func WantsNotice(globs []string, typ string) bool {
	for _, g := range globs {
		if strings.HasPrefix(g, NoticeTypePrefix) && MatchType(g, typ) {
			return true
		}
	}
	return false
}

// Secret is one endpoint signing secret; an old one keeps signing until
// ExpiresAt after a rotation.
type Secret struct {
	Value     string    `json:"value"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// RetryPolicy is an endpoint's backoff.
type RetryPolicy struct {
	InitialInterval time.Duration `json:"initial_interval"`
	Multiplier      float64       `json:"multiplier"`
	MaxInterval     time.Duration `json:"max_interval"`
	Randomization   float64       `json:"randomization"`
	MaxAttempts     int           `json:"max_attempts"`
	MaxElapsed      time.Duration `json:"max_elapsed"`
}

// Endpoint is a subscriber.
type Endpoint struct {
	ID             string            `json:"id"`
	Tenant         string            `json:"tenant"`
	URL            string            `json:"url"`
	Secrets        []Secret          `json:"secrets"`
	Sources        []string          `json:"sources,omitempty"`
	EventTypes     []string          `json:"event_types,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	Timeout        time.Duration     `json:"timeout"`
	MaxInFlight    int               `json:"max_in_flight"`
	RateLimit      float64           `json:"rate_limit"`
	Retry          RetryPolicy       `json:"retry"`
	Disabled       bool              `json:"disabled"`
	DisabledReason string            `json:"disabled_reason,omitempty"`
	// FromConfig marks endpoints applied from config.yaml at start.
	FromConfig bool `json:"from_config,omitempty"`
	// CreatedBy names the admin request that created the endpoint under
	// an Idempotency-Key (a DerivedID of the key's use), so that the
	// request run again finds it as its own; empty otherwise.
	CreatedBy string    `json:"created_by,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// VerifyConfig is how a source's requests are authenticated.
type VerifyConfig struct {
	Scheme    string        `json:"scheme"`
	Secrets   []string      `json:"secrets,omitempty"`
	Tolerance time.Duration `json:"tolerance,omitempty"`
	Header    string        `json:"header,omitempty"`
	Algorithm string        `json:"algorithm,omitempty"`
	Encoding  string        `json:"encoding,omitempty"`
	Prefix    string        `json:"prefix,omitempty"`
}

// Source is a provider posting to /ingest/{ID}.
type Source struct {
	ID         string       `json:"id"`
	Tenant     string       `json:"tenant"`
	Verify     VerifyConfig `json:"verify"`
	EventID    string       `json:"event_id,omitempty"`
	EventType  string       `json:"event_type,omitempty"`
	FromConfig bool         `json:"from_config,omitempty"`
	CreatedBy  string       `json:"created_by,omitempty"` // as Endpoint.CreatedBy
	CreatedAt  time.Time    `json:"created_at"`
	UpdatedAt  time.Time    `json:"updated_at"`
}

// PageBytes bounds the bodies and headers of the events on one page of
// ListEvents (see Inspector).
const PageBytes = 8 << 20

// EventFilter selects events; zero fields match everything. Results are
// newest first.
type EventFilter struct {
	Tenant string // "" = all tenants
	Source string
	Type   string // a type, or a glob of types (MatchType), e.g. "invoice.*"
	// EventID is the provider's event ID (Event.EventID), exactly.
	EventID string
	// State is the event's state over its deliveries (StateOf); "" = any.
	State  EventState
	Since  time.Time
	Until  time.Time
	Limit  int
	Cursor string
}

// EventState is where an event stands over its deliveries: what
// GET /events?state= lists.
type EventState string

const (
	// EventPending: a delivery of the event is still live (pending or in
	// flight).
	EventPending EventState = "pending"
	// EventDelivered: none is live, and the latest delivery to each of its
	// endpoints succeeded.
	EventDelivered EventState = "delivered"
	// EventFailed: none is live, and the latest delivery to at least one
	// endpoint did not succeed (failed, or cancelled with its endpoint).
	EventFailed EventState = "failed"
	// EventUnmatched: the event has no delivery at all: no endpoint matched
	// at ingest, and none was replayed to since.
	EventUnmatched EventState = "unmatched"
)

// EventStates are the valid states, in the order a reader meets them.
var EventStates = []EventState{EventPending, EventDelivered, EventFailed, EventUnmatched}

// StateOf is the state of an event with deliveries ds (in any order). An
// endpoint's latest delivery is the one created last (the greater id
// between two created at once).
func StateOf(ds []Delivery) EventState {
	if len(ds) == 0 {
		return EventUnmatched
	}
	latest := map[string]*Delivery{}
	for i := range ds {
		d := &ds[i]
		if !d.State.Terminal() {
			return EventPending
		}
		if l := latest[d.Endpoint]; l == nil || d.CreatedAt.After(l.CreatedAt) || d.CreatedAt.Equal(l.CreatedAt) && d.ID > l.ID {
			latest[d.Endpoint] = d
		}
	}
	for _, d := range latest {
		if d.State != StateSucceeded {
			return EventFailed
		}
	}
	return EventDelivered
}

// DeliveryFilter selects deliveries, newest first.
type DeliveryFilter struct {
	Tenant   string
	Endpoint string
	State    DeliveryState
	Event    string
	Since    time.Time
	Until    time.Time
	Limit    int
	Cursor   string
}

// IdemClaim asks for an admin idempotency key.
type IdemClaim struct {
	Tenant      string
	Key         string
	RequestHash [32]byte
	Now         time.Time
	LeaseUntil  time.Time
	// Remember is how long the use of the key this claim begins is
	// remembered when its request never stores an answer (it died, or
	// gave the key up after a 5xx): until then a retry of the same request
	// continues that use (IdemResult.Since). Zero: until LeaseUntil.
	Remember time.Time
}

// IdemState is the outcome of ClaimKey.
type IdemState int

// ClaimKey outcomes.
const (
	// IdemNew: the caller holds the key and must execute the request.
	IdemNew IdemState = iota
	// IdemReplay: the request ran before; Response holds its answer.
	IdemReplay
	// IdemInProgress: another request holds the key until LeaseUntil.
	IdemInProgress
	// IdemMismatch: the key was used for a different request: answered,
	// running, or claimed and given up or left by a dead run while that
	// use is remembered.
	IdemMismatch
)

// IdemResult is what ClaimKey found.
type IdemResult struct {
	State      IdemState
	Response   Response
	LeaseUntil time.Time
	// Since is, with IdemNew, when this use of the key began: the Now of
	// the first claim of the same request, kept while that use is
	// remembered (IdemClaim.Remember) however often a dead or given-up
	// claim is taken over; a new Now once the key expired, or for another
	// request. What a request creates may be named after it: every run of
	// one use then names the same thing.
	Since time.Time
}

// ReplayState is where a bulk replay is.
type ReplayState string

// Replay states.
const (
	ReplayRunning   ReplayState = "running"
	ReplayCompleted ReplayState = "completed"
	ReplayFailed    ReplayState = "failed"
)

// ReplayJob is a bulk replay, persisted so that it resumes after a restart.
type ReplayJob struct {
	ID       string `json:"id"`
	Tenant   string `json:"tenant"`
	Source   string `json:"source,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Status   string `json:"status,omitempty"`
	// EventState selects the events by their state (StateOf).
	EventState EventState  `json:"event_state,omitempty"`
	Since      time.Time   `json:"since,omitzero"`
	Until      time.Time   `json:"until,omitzero"`
	State      ReplayState `json:"state"`
	Matched    int         `json:"matched"`
	Enqueued   int         `json:"enqueued"`
	// Cursor is where a resumed job continues: the batch of events after
	// it. Written, when set, is the last event of that batch whose
	// deliveries are stored (those listed before it are too).
	Cursor    string    `json:"cursor,omitempty"`
	Written   string    `json:"written,omitempty"`
	Error     string    `json:"error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// LeaseGroup is the claimed deliveries that share one lease: what one
// Outbox.Release call takes.
type LeaseGroup struct {
	Lease time.Time
	IDs   []string
}

// LeaseGroups groups the claimed (delivering) deliveries of ds by lease,
// in order of first appearance, so that releasing them is one write per
// lease instead of one per delivery.
func LeaseGroups(ds []Delivery) []LeaseGroup {
	var out []LeaseGroup
	at := map[int64]int{}
	for _, d := range ds {
		if d.State != StateDelivering {
			continue
		}
		k := d.LeaseUntil.UnixNano()
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, LeaseGroup{Lease: d.LeaseUntil})
		}
		out[i].IDs = append(out[i].IDs, d.ID)
	}
	return out
}
