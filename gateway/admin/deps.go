package admin

import (
	"context"
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"

	"hookgate/gateway/config"
	"hookgate/inbound"
	"hookgate/outbound"
	"hookgate/storage"
)

// Deps is what the admin API needs from the gateway that serves it, each
// part through the narrowest interface that does.
type Deps struct {
	// Config is the gateway's configuration: tokens, server.max_body,
	// delivery defaults, retention and the dedupe TTL (idempotency keys
	// are remembered as long as inbound event ids).
	Config *config.Config
	Store  Store
	// Registry is the in-memory view of sources and endpoints.
	Registry   Registry
	Dispatcher Dispatcher
	// Publisher takes POST /events through the ingest path.
	Publisher Publisher
	// Replays runs bulk replay jobs.
	Replays interface{ Submit(id string) }
	// Backlogs cancels the deliveries of deleted endpoints.
	Backlogs Backlogs
	// Metrics forgets the series of deleted endpoints and sources.
	Metrics Metrics
	// Recent is the last hour of the gateway's work (GET /stats).
	Recent *Recent
	Log    *slog.Logger
}

// Store is the part of the store the admin API reads and changes.
type Store interface {
	storage.Catalog
	storage.Inspector
	storage.Idempotency
	CreateReplay(ctx context.Context, job *storage.ReplayJob) error
	GetReplay(ctx context.Context, id string) (storage.ReplayJob, error)
	ListReplays(ctx context.Context, state storage.ReplayState) ([]storage.ReplayJob, error)
	Enqueue(ctx context.Context, ds []storage.Delivery) error
	Retry(ctx context.Context, id string, now time.Time) (storage.Delivery, error)
	Depth(ctx context.Context, endpoint string, now time.Time, limit int) (live, due int, err error)
}

// View is one consistent state of the sources and endpoints in memory.
type View struct {
	Sources   map[string]*inbound.Source
	Endpoints []storage.Endpoint
	// ByTenant lists the endpoints of each tenant.
	ByTenant map[string][]storage.Endpoint
}

// Registry is the gateway's in-memory view of the catalog. The store is
// the truth: a handler writes there, then reloads the view.
type Registry interface {
	Current() View
	// Use returns the current view and holds it, until done is called,
	// against an endpoint's delete (Exclusive): deliveries written for the
	// view's endpoints are never written after the delete cancelled them.
	Use() (v View, done func())
	// Exclusive runs fn while no view is in Use.
	Exclusive(fn func() error) error
	// Reload rebuilds the view from the store and hands it to the ingest
	// path and the dispatcher; on failure the view is marked stale.
	Reload()
	// MarkStale says the view may be older than the store (a write whose
	// outcome is unknown): it is reloaded in the background until a reload
	// succeeds.
	MarkStale()
}

// Dispatcher is the delivery workers, as the admin API drives them.
type Dispatcher interface {
	// Notify wakes the endpoints' workers: deliveries were written.
	Notify(endpointIDs ...string)
	// RetryNow ends an endpoint's pause (an operator's retry).
	RetryNow(endpointID string)
	EndpointPause(endpointID string, now time.Time) (outbound.Pause, bool)
	// EndpointNotice is the operational event an operator's change of ep
	// raises (outbound.NoticePayload), to store with the change; nil for
	// none.
	EndpointNotice(ep storage.Endpoint, typ, reason string, now time.Time) *storage.Notice
	// NotifyNotice wakes the recipients of stored operational events.
	NotifyNotice(ns ...*storage.Notice)
}

// Publisher is the ingest path, for POST /events.
type Publisher interface {
	Receive(ctx context.Context, src *inbound.Source, endpoints []storage.Endpoint, in inbound.Inbound) (inbound.Received, error)
	// Answer writes what ingest answers for res, or for err when not nil.
	Answer(c *fiber.Ctx, source string, res inbound.Received, err error) error
	// Count counts an ingest outcome of source in the gateway's metrics.
	Count(source, outcome string)
}

// Backlogs cancels, in the background, the deliveries of deleted endpoints.
type Backlogs interface {
	// Add queues endpoint id's deliveries for cancelling; the channel is
	// closed once they are.
	Add(id string) <-chan struct{}
	// Pending reports whether id's deliveries are still being cancelled.
	Pending(id string) bool
}

// Metrics is the gateway's metrics, as far as deletes change them.
type Metrics interface {
	ForgetEndpoint(id string)
	ForgetSource(id string)
}

// DepthLimit is how far an endpoint's backlog is counted (GET
// /endpoints/{id}/stats and the gateway's gauges): a gauge needs no exact
// figure for a huge backlog, and counting is bounded.
const DepthLimit = 100_000
