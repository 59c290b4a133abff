// Package gateway is hookgate's process: config, the public ingest
// listener, the admin listener, and the lifecycle that ties the store, the
// inbound accepter and the outbound dispatcher together. It is the only
// package that knows all the others.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"

	"hookgate/gateway/config"
	"hookgate/inbound"
	"hookgate/outbound"
	"hookgate/storage"
	"hookgate/storage/badger"
	"hookgate/storage/postgres"
)

// DefaultGrace bounds shutdown: in-flight ingests and delivery attempts get
// this long to finish. It leaves room, within the 10 s `docker stop` waits
// before SIGKILL, for flushing and closing the store after it (a grace of
// 10 s was SIGKILLed before the store was closed).
const DefaultGrace = 8 * time.Second

// Options are the process-level settings that are not in config.yaml.
type Options struct {
	// Logger is where everything logs; nil = slog.Default().
	Logger *slog.Logger
	// Version is reported in User-Agent and `hookgate version`.
	Version string
	// Grace bounds shutdown (default DefaultGrace).
	Grace time.Duration
	// HeapProfile, when set, is a file the heap profile is written to when
	// Run is asked to stop, before shutting down (HOOKGATE_MEMPROFILE).
	HeapProfile string
	// Store, when set, is used instead of opening the configured one
	// (tests wrap the real store to inject faults). Close closes it.
	Store storage.Store
	// DeliveryPoll is the longest an idle endpoint waits before looking
	// at its outbox again (outbound.Config.Poll; 0 = its default). Tests
	// lengthen it to show that wake-ups come sooner.
	DeliveryPoll time.Duration
}

// dispatcher is what the gateway needs of the outbound dispatcher.
type dispatcher interface {
	Start(ctx context.Context)
	Stop(grace time.Duration)
	Notify(endpoints ...string)
	RetryNow(endpoint string)
	SetEndpoints(eps []storage.Endpoint)
	EndpointPause(endpoint string, now time.Time) (outbound.Pause, bool)
	EndpointNotice(ep storage.Endpoint, typ, reason string, now time.Time) *storage.Notice
	NotifyNotice(ns ...*storage.Notice)
}

// Gateway is a running hookgate.
type Gateway struct {
	cfg     *config.Config
	opts    Options
	log     *slog.Logger
	store   storage.Store
	reg     *registry
	recv    *inbound.Receiver
	disp    dispatcher
	metrics *metrics
	public  *fiber.App
	admin   *fiber.App
	bg      *background
	// backlogs cancels deleted endpoints' deliveries (backlogs.go).
	backlogs *backlogs
	// client sends deliveries (the dispatcher's).
	client *http.Client

	publicLn, adminLn *trackingListener
	// bound are the listeners New binds before it touches the store, for
	// Start to serve: a start that cannot bind must change nothing (it
	// applied config.yaml first, and a removed endpoint came back with a
	// new secret at the next start).
	bound    [2]net.Listener
	serveErr chan error
	failOnce sync.Once // storeFailed reports once
	// registryStale is set while the registry in memory may be older than
	// the store's catalog (a reload after a change failed to read it, or a
	// catalog write failed and may have been stored all the same): the
	// store check reloads it.
	registryStale atomic.Bool
	stopOnce      sync.Once
	stopErr       error
}

// New binds both listeners, opens the store, applies the config's sources
// and endpoints, and builds the servers and the dispatcher. Nothing is
// served until Start (connections wait in the listen queue); Shutdown
// closes what New made.
func New(ctx context.Context, cfg *config.Config, opts Options) (*Gateway, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	g := &Gateway{cfg: cfg, opts: opts, log: opts.Logger, serveErr: make(chan error, 3)}
	if err := g.bind(); err != nil {
		return nil, err
	}
	g.store = opts.Store
	if g.store == nil {
		s, err := openStore(ctx, cfg, opts.Logger)
		if err != nil {
			g.unbind()
			return nil, err
		}
		g.store = s
	}
	if err := g.init(ctx); err != nil {
		g.unbind()
		_ = g.store.Close()
		return nil, err
	}
	return g, nil
}

// bind binds the ingest and admin listeners, or neither.
func (g *Gateway) bind() error {
	publicLn, err := net.Listen("tcp", g.cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("public listener: %w", err)
	}
	adminLn, err := net.Listen("tcp", g.cfg.Admin.Listen)
	if err != nil {
		_ = publicLn.Close()
		return fmt.Errorf("admin listener: %w", err)
	}
	g.bound = [2]net.Listener{publicLn, adminLn}
	return nil
}

// unbind closes the listeners New bound and Start has not taken.
func (g *Gateway) unbind() {
	for i, ln := range g.bound {
		if ln != nil {
			_ = ln.Close()
			g.bound[i] = nil
		}
	}
}

// openStore opens the configured storage engine.
func openStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (storage.Store, error) {
	switch cfg.Storage.Driver {
	case "postgres":
		ctx, cancel := context.WithTimeout(ctx, postgresOpenTimeout)
		defer cancel()
		return postgres.Open(ctx, cfg.Storage.Postgres.DSN, postgres.Options{MaxConns: cfg.Storage.Postgres.MaxConns, Logger: log})
	case "", "badger":
		if cfg.Server.MaxBody > badger.MaxInlineBody {
			log.Warn("server.max_body is over 1.9MiB: events larger than about that are kept in Badger's value log, whose disk space is not reclaimed when they are purged",
				"max_body", cfg.Server.MaxBody)
		}
		return badger.Open(cfg.Storage.Path, badger.Options{Logger: log})
	}
	return nil, fmt.Errorf("storage driver %q is not supported", cfg.Storage.Driver)
}

// postgresOpenTimeout bounds the start's wait for the database: a gateway
// that cannot reach it refuses to start, saying why.
const postgresOpenTimeout = 30 * time.Second

func (g *Gateway) init(ctx context.Context) error {
	if err := config.CheckAdminExposure(g.cfg); err != nil {
		return err
	}
	queued, err := g.applyConfigOnce(ctx)
	if err != nil {
		return err
	}
	g.metrics = newMetrics(g.store)
	g.reg = newRegistry(g.store, g.log)
	snap, err := g.reg.reload(ctx, nil)
	if err != nil {
		return err
	}
	g.backlogs = newBacklogs(g)
	g.backlogs.findOrphans(queued, func(id string) bool {
		return slices.ContainsFunc(snap.endpoints, func(ep storage.Endpoint) bool { return ep.ID == id })
	})
	g.recv = &inbound.Receiver{Store: g.store, DedupeTTL: g.cfg.Dedupe.TTL.D()}
	g.client = outbound.NewClient(g.cfg.Delivery.AllowPrivateTargets)
	d, err := outbound.New(outbound.Config{
		Store:          g.store,
		Client:         g.client,
		Version:        g.opts.Version,
		DefaultTimeout: g.cfg.Delivery.Timeout.D(),
		Logger:         g.log,
		Metrics:        g.metrics,
		// A 410 disabled an endpoint: ingest stops fanning out to it.
		OnDisable:     func(storage.Endpoint) { g.reloadRegistry() },
		Gates:         g.gates(),
		Poll:          g.opts.DeliveryPoll,
		AlertEndpoint: g.alertEndpoint(),
		OnNotice:      g.announceNotices(),
	})
	if err != nil {
		return err
	}
	d.SetEndpoints(snap.endpoints)
	g.disp = d
	if c, shared := g.cluster(); shared {
		g.disp = announcer{dispatcher: d, c: c}
	}
	// New deliveries go straight to a free slot of their endpoint (written
	// claimed, sent with the event in hand); the rest wait in the outbox.
	// Not on a shared store: there a slot of this gateway's is not a slot
	// of the endpoint's, whose max_in_flight the store's Claim holds
	// across every gateway; the dispatcher is woken instead.
	if _, shared := g.cluster(); !shared {
		g.recv.HandOff = d
	}
	g.bg = newBackground(g)
	g.public = fiber.New(fiber.Config{
		AppName:               "hookgate",
		BodyLimit:             int(g.cfg.Server.MaxBody),
		DisableStartupMessage: true,
		// A multipart body (SendGrid, Mailgun) is kept as sent: parsed
		// ahead, fasthttp gave the handler the form marshalled again, its
		// parts in random order and their headers dropped.
		DisablePreParseMultipartForm: true,
		ErrorHandler:                 g.publicError,
		ReadTimeout:                  30 * time.Second,
		WriteTimeout:                 30 * time.Second,
		IdleTimeout:                  120 * time.Second,
		ReadBufferSize:               16 << 10,
	})
	g.public.Use(recoverPanics(g.log, g.metrics.refused("ingest", "panic")), checkFraming(g.metrics.refused("ingest", "framing")),
		g.countRefusedEncodings, refuseEncodedBodies)
	g.public.Post("/ingest/:source", g.ingest)
	refuseUnknownMethods(g.public, g.metrics.refused("ingest", "method"))
	countParserRefusals(g.public, g.metrics.refused("ingest", "headers"), g.metrics.refused("ingest", "timeout"), g.metrics.refused("ingest", "framing"))
	g.admin = g.newAdminApp()
	return nil
}

// applyConfigOnce applies config.yaml, under the cluster's config lock on
// a shared store: gateways starting at once take turns, and each finds
// what the one before it wrote (a generated secret is generated once).
// It returns the endpoint ids with live deliveries.
func (g *Gateway) applyConfigOnce(ctx context.Context) ([]string, error) {
	unlock, err := g.lockCluster(ctx, lockConfig)
	if err != nil {
		return nil, fmt.Errorf("wait for the config lock: %w", err)
	}
	defer unlock()
	// Endpoint ids with live deliveries: those of deleted endpoints are
	// cancelled, before config.yaml may create the id again or after
	// (backlogs.go). Applying the config moves no delivery: one scan serves.
	queued, err := g.store.QueuedEndpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("look for deliveries of deleted endpoints: %w", err)
	}
	if err := refuseTakeovers(ctx, g.cfg, g.store); err != nil {
		return nil, err
	}
	if err := cancelReusedOrphans(ctx, g.store, g.cfg, g.log, queued); err != nil {
		return nil, err
	}
	if err := applyConfig(ctx, g.cfg, g.store, outbound.NewSecret, time.Now().UTC()); err != nil {
		return nil, fmt.Errorf("apply config: %w", err)
	}
	return queued, nil
}

// Start serves both listeners (bound by New) and starts the dispatcher
// and the background jobs. It returns at once.
func (g *Gateway) Start(ctx context.Context) error {
	publicLn, adminLn := g.bound[0], g.bound[1]
	if publicLn == nil || adminLn == nil {
		return errors.New("start: the gateway was started before, or shut down")
	}
	g.bound = [2]net.Listener{}
	g.publicLn, g.adminLn = newTrackingListener(publicLn), newTrackingListener(adminLn)
	g.disp.Start(ctx)
	g.bg.start(ctx)
	go func() { g.serveErr <- g.public.Listener(g.publicLn) }()
	go func() { g.serveErr <- g.admin.Listener(g.adminLn) }()
	g.warnBlockedTargets()
	g.warnLongRetries()
	g.log.Info("hookgate started", "version", g.opts.Version, "ingest", g.publicLn.Addr().String(),
		"admin", g.adminLn.Addr().String(), "storage", g.storageName())
	return nil
}

// alertEndpoint is the id of the alerts.url endpoint, "" without one.
func (g *Gateway) alertEndpoint() string {
	if _, ok := g.cfg.AlertsEndpoint(); ok {
		return config.AlertsEndpointID
	}
	return ""
}

// storageName says where the data is, for the start's log line: never
// the DSN, which holds a password.
func (g *Gateway) storageName() string {
	if g.cfg.Storage.Driver == "postgres" {
		return "postgres"
	}
	return g.cfg.Storage.Path
}

// reloadRegistry refreshes the in-memory sources and endpoints (ingest's
// view and the dispatcher's) from the store after a change: the store is
// written first, then every in-memory view is rebuilt from it.
func (g *Gateway) reloadRegistry() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Cleared before the catalog is read: a mark set while this reload
	// runs (a catalog write it may not see) must stay for the next one.
	g.registryStale.Store(false)
	_, err := g.reg.reload(ctx, func(snap *snapshot) {
		g.metrics.live(snap.endpoints)
		g.disp.SetEndpoints(snap.endpoints)
	})
	if err != nil {
		g.registryStale.Store(true)
		g.log.Error("reload sources and endpoints; trying again with the next store check", "err", err)
	}
}

// PublicAddr is the bound ingest address (after Start).
func (g *Gateway) PublicAddr() string { return g.publicLn.Addr().String() }

// AdminAddr is the bound admin address (after Start).
func (g *Gateway) AdminAddr() string { return g.adminLn.Addr().String() }

// Store is the gateway's store.
func (g *Gateway) Store() storage.Store { return g.store }

// Errors reports a listener that stopped serving on its own, or a store
// that failed for good: Run then stops, and the binary exits 1.
func (g *Gateway) Errors() <-chan error { return g.serveErr }

// storeFailed stops the gateway when err says the store failed for good
// (storage.ErrStoreFailed: a failed fsync). Until it is opened again it
// refuses every write, so only a restart by the process's supervisor
// brings ingest back; staying up, the gateway looked alive (/healthz) and
// refused every webhook until someone noticed.
func (g *Gateway) storeFailed(err error) {
	if !errors.Is(err, storage.ErrStoreFailed) {
		return
	}
	g.failOnce.Do(func() {
		g.log.Error("the store failed and must be reopened: stopping, for a restart", "err", err)
		g.serveErr <- fmt.Errorf("store: %w", err)
	})
}

// Shutdown stops in this order, all of it bounded by one grace period:
//  1. both listeners stop accepting, at once, and their requests in
//     flight finish (an ingest is answered after its durable write, or
//     not at all; the admin API takes events and replays too);
//  2. the dispatcher stops claiming; in-flight attempts finish or are
//     released (or left to their lease);
//  3. background jobs (retention, replays) stop;
//  4. the store flushes and closes.
//
// It is idempotent.
func (g *Gateway) Shutdown() error {
	g.stopOnce.Do(func() {
		grace := g.opts.Grace
		deadline := time.Now().Add(grace)
		// Both listeners stop accepting at once (the admin API takes
		// events and replays too), and finish their requests in flight;
		// then the dispatcher finishes its attempts; then the store closes.
		var mu sync.Mutex
		var errs []error
		var wg sync.WaitGroup
		for _, s := range []struct {
			name string
			app  *fiber.App
			ln   *trackingListener
		}{{"ingest", g.public, g.publicLn}, {"admin", g.admin, g.adminLn}} {
			if s.ln == nil {
				continue
			}
			wg.Go(func() {
				err := g.shutdownServer(s.name, s.app, s.ln, grace)
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			})
		}
		wg.Wait()
		g.unbind() // made by New, never served
		// What is left of the grace period: attempts still running then
		// are cancelled and their claims released.
		g.disp.Stop(max(0, time.Until(deadline)))
		g.client.CloseIdleConnections() // its keep-alive connections to receivers
		g.bg.stop()
		errs = append(errs, g.store.Close())
		g.stopErr = errors.Join(errs...)
		g.log.Info("hookgate stopped")
	})
	return g.stopErr
}

// shutdownServer stops app from accepting and waits up to grace for its
// requests in flight. The grace period bounds the wait (SPEC: exit 0 after
// it): connections still open then (a client stalled halfway through a
// request, a handler not done) are closed, with a warning, not an error.
// Nothing they carried was acknowledged.
func (g *Gateway) shutdownServer(name string, app *fiber.App, ln *trackingListener, grace time.Duration) error {
	err := app.ShutdownWithTimeout(grace)
	// fasthttp closes only the listeners its Serve has registered: a
	// shutdown right after Start could leave a Serve that had not got
	// there yet accepting for good. Closing ours too ends it (the second
	// close of a listener fasthttp closed is a harmless error).
	_ = ln.Listener.Close()
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	n := ln.closeAll()
	g.log.Warn("grace period over: closed connections still open", "listener", name, "connections", n, "grace", grace.String())
	return nil
}

// writeHeapProfile writes the live heap to path.
func (g *Gateway) writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		g.log.Error("heap profile", "err", err)
		return
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		g.log.Error("heap profile", "err", err)
	}
}

// Run starts a gateway and serves until ctx is done, then shuts it down.
func Run(ctx context.Context, cfg *config.Config, opts Options) error {
	g, err := New(ctx, cfg, opts)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Stopped (SIGINT/SIGTERM) while starting: not a failure.
			// New has closed what it opened; what it applied is durable.
			return nil
		}
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	if err := g.Start(runCtx); err != nil {
		_ = g.Shutdown()
		return err
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-g.Errors():
	}
	if g.opts.HeapProfile != "" {
		g.writeHeapProfile(g.opts.HeapProfile)
	}
	g.log.Info("shutting down", "grace", g.opts.Grace.String())
	return errors.Join(serveErr, g.Shutdown())
}

// warnBlockedTargets names the configured endpoints whose every delivery
// will be refused (a literal private address or localhost, with
// allow_private_targets false). A warning, not a config error: such a
// config started before, and its deliveries stay replayable once the URL
// or the setting is changed. The URL is not logged (it may carry tokens).
// warnLongRetries names the endpoints whose retry window is longer than
// retention (created through the API before retention was lowered): their
// events outlive retention while their deliveries retry.
func (g *Gateway) warnLongRetries() {
	snap := g.reg.current()
	if snap == nil {
		return
	}
	r := g.cfg.Retention.D()
	for i := range snap.endpoints {
		ep := &snap.endpoints[i]
		if w := outbound.WithDefaults(ep.Retry).MaxElapsed; w > r {
			g.log.Warn("endpoint retries for longer than retention: its events are kept past retention while their deliveries retry; lower its retry.max_elapsed with PATCH /endpoints/{id}",
				"endpoint", ep.ID, "tenant", ep.Tenant, "max_elapsed", w.String(), "retention", r.String())
		}
	}
}

func (g *Gateway) warnBlockedTargets() {
	if g.cfg.Delivery.AllowPrivateTargets {
		return
	}
	for _, ec := range g.cfg.AllEndpoints() {
		if reason, blocked := outbound.BlockedURL(ec.URL); blocked {
			g.log.Warn("endpoint points at a "+reason+" address: its deliveries will be refused (delivery.allow_private_targets is false)", "endpoint", ec.ID)
		}
	}
}
