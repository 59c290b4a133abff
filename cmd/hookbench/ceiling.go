package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/gofiber/fiber/v2"
)

// serveBareFiber is the ceiling: a Fiber app whose only handler reads the
// body and answers 202, with nothing behind it.
func serveBareFiber(addr string) error {
	app := fiber.New(fiber.Config{DisableStartupMessage: true, BodyLimit: 1 << 20})
	app.Post("/ingest/:source", func(c *fiber.Ctx) error {
		_ = c.Body()
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(fiber.StatusAccepted).SendString(`{"id":"evt_bare","event_id":"bare"}`)
	})
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok") })
	return app.Listen(addr)
}

// measureCeiling runs the bare handler in a child process (this binary
// with -serve-bare) and drives it exactly like the gateway.
func measureCeiling(ctx context.Context, o options) (Result, error) {
	addr, err := freeAddr()
	if err != nil {
		return Result{}, err
	}
	self, err := os.Executable()
	if err != nil {
		return Result{}, err
	}
	dir, err := os.MkdirTemp("", "hookbench-bare")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	progress("== ceiling: bare Fiber handler")
	p, err := startProcess(ctx, self, []string{"-serve-bare", addr}, "http://"+addr+"/healthz", filepath.Join(dir, "bare.log"))
	if err != nil {
		return Result{}, err
	}
	defer p.kill()
	cpu0 := p.cpu()
	lr := drive(ctx, loadSpec{urls: []string{"http://" + addr + "/ingest/bench"}, clients: o.clients, duration: o.duration, bodySize: o.bodySize, prefix: "bare"})
	r := summarize("ceiling (bare Fiber 202)", o, lr)
	r.CPUPerReqUs = cpuPerRequest(cpu0, p.cpu(), lr.OK)
	_, peak := p.rssKiB()
	r.PeakRSSMiB = float64(peak) / 1024
	return r, nil
}

// ingestOnly drives an existing gateway's bench source.
func ingestOnly(ctx context.Context, o options) (Result, error) {
	lr := drive(ctx, loadSpec{urls: []string{o.target + "/ingest/bench"}, clients: o.clients, duration: o.duration, bodySize: o.bodySize, retries: o.retries, prefix: "target"})
	return summarize("target", o, lr), nil
}
