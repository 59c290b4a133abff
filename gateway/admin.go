package gateway

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// newAdminApp builds the admin listener: health, readiness and metrics
// without a token, the API under /api/v1 with one.
func (g *Gateway) newAdminApp() *fiber.App {
	app := fiber.New(fiber.Config{
		AppName:               "hookgate-admin",
		BodyLimit:             1 << 20,
		DisableStartupMessage: true,
		ErrorHandler:          errorHandler,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
	})
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	app.Get("/readyz", g.readyz)
	app.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{})))
	return app
}

// readyz answers 200 when the store is open and takes a durable write.
func (g *Gateway) readyz(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
	defer cancel()
	if err := g.store.Ping(ctx); err != nil {
		return problem(c, fiber.StatusServiceUnavailable, "not-ready", "Service Unavailable", "the store is not writable")
	}
	return c.JSON(fiber.Map{"status": "ready"})
}
