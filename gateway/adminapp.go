package gateway

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"hookgate/gateway/admin"
	"hookgate/gateway/console"
	"hookgate/gateway/problem"
	"hookgate/inbound"
	"hookgate/storage"
)

// newAdminApp builds the admin listener: health, readiness and metrics
// without a token, the web console's files, and the admin API (package
// admin) under /api/v1.
func (g *Gateway) newAdminApp() *fiber.App {
	app := fiber.New(fiber.Config{
		AppName:                      "hookgate-admin",
		BodyLimit:                    admin.BodyLimit(int64(g.cfg.Server.MaxBody)),
		DisableStartupMessage:        true,
		DisablePreParseMultipartForm: true,
		ErrorHandler:                 admin.ErrorHandler,
		JSONEncoder:                  admin.JSONEncoder,
		ReadTimeout:                  30 * time.Second,
		WriteTimeout:                 30 * time.Second,
		ReadBufferSize:               16 << 10, // the header block's limit, as on the ingest listener
	})
	app.Use(recoverPanics(g.log, g.metrics.refused("admin", "panic")), checkFraming(g.metrics.refused("admin", "framing")), refuseEncodedBodies)
	console.Mount(app) // the web console's static files, /ui/ (docs/console.md)
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	app.Get("/readyz", g.readyz)
	app.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{})))
	api := admin.New(admin.Deps{
		Config: g.cfg, Store: g.store, Registry: adminRegistry{g}, Dispatcher: g.disp,
		Publisher: publisher{g}, Replays: g.bg.replays, Backlogs: g.backlogs, Metrics: g.metrics,
		Recent: &g.metrics.recent, Log: g.log,
	})
	api.Routes(app.Group("/api/v1"))
	refuseUnknownMethods(app, g.metrics.refused("admin", "method"))
	countParserRefusals(app, g.metrics.refused("admin", "headers"), g.metrics.refused("admin", "timeout"), g.metrics.refused("admin", "framing"))
	return app
}

// readyz answers 200 when the store is open and takes a durable write.
func (g *Gateway) readyz(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
	defer cancel()
	if err := g.store.Ping(ctx); err != nil {
		g.storeFailed(err)
		return problem.Answer(c, fiber.StatusServiceUnavailable, "not-ready", "Service Unavailable", "the store is not writable")
	}
	return c.JSON(fiber.Map{"status": "ready"})
}

// adminRegistry is the registry as the admin API sees it.
type adminRegistry struct{ g *Gateway }

func (r adminRegistry) Current() admin.View { return r.g.reg.current().view() }

func (r adminRegistry) Use() (admin.View, func()) {
	snap, done := r.g.reg.use()
	return snap.view(), done
}

func (r adminRegistry) Exclusive(fn func() error) error { return r.g.reg.exclusive(fn) }
func (r adminRegistry) Reload()                         { r.g.reloadRegistry() }
func (r adminRegistry) MarkStale()                      { r.g.registryStale.Store(true) }

// publisher is the ingest path as POST /events uses it.
type publisher struct{ g *Gateway }

func (p publisher) Receive(ctx context.Context, src *inbound.Source, eps []storage.Endpoint, in inbound.Inbound) (inbound.Received, error) {
	return p.g.recv.Receive(ctx, src, eps, in)
}

func (p publisher) Answer(c *fiber.Ctx, source string, res inbound.Received, err error) error {
	if err != nil {
		return p.g.ingestError(c, source, err)
	}
	return p.g.answerAccepted(c, source, res)
}

func (p publisher) Count(source, outcome string) { p.g.metrics.ingest(source, outcome) }
