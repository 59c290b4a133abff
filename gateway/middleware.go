package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"hookgate/gateway/problem"
)

// refuseUnknownMethods makes app answer a request whose method Fiber does
// not know (a lowercase "post", PROPFIND) with a 400 problem: Fiber's
// router answered it itself, in text/plain, before any middleware or
// error handler runs.
func refuseUnknownMethods(app *fiber.App, counted prometheus.Counter) {
	next := app.Server().Handler
	body, _ := json.Marshal(problem.Details{Type: problem.Base + "bad-request", Title: "Bad Request",
		Status: fiber.StatusBadRequest, Detail: "unknown HTTP method"})
	app.Server().Handler = func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Method()) {
		case fiber.MethodGet, fiber.MethodHead, fiber.MethodPost, fiber.MethodPut, fiber.MethodDelete,
			fiber.MethodConnect, fiber.MethodOptions, fiber.MethodTrace, fiber.MethodPatch: // fiber.DefaultMethods
			next(ctx)
			return
		}
		counted.Inc()
		// Closed, as after checkFraming's 400: the request's framing was
		// never checked, so what follows it on the connection may be a
		// body a proxy in front forwarded, not a request.
		ctx.SetConnectionClose()
		ctx.SetStatusCode(fiber.StatusBadRequest)
		ctx.SetContentType("application/problem+json")
		ctx.SetBody(body)
	}
}

// countParserRefusals counts, by reason, the requests app's HTTP server
// refuses before any handler runs: a header block over its read buffer
// (headers, 431), a request that stopped arriving (timeout, 408), one it
// cannot parse (framing, 400: a Content-Length that is no number, a body
// that is not chunked under Transfer-Encoding). A body over the limit
// (413) is counted as an ingest outcome (too_large), by publicError.
func countParserRefusals(app *fiber.App, headers, timeout, framing prometheus.Counter) {
	srv := app.Server()
	next := srv.ErrorHandler
	srv.ErrorHandler = func(ctx *fasthttp.RequestCtx, err error) {
		// fasthttp closes the connection after any of these, maybe with
		// the request's body still unread.
		lingerOnClose(ctx.Conn())
		var netErr net.Error
		switch {
		case errors.As(err, new(*fasthttp.ErrSmallBuffer)):
			headers.Inc()
		case errors.As(err, &netErr) && netErr.Timeout(), strings.Contains(err.Error(), "timeout"):
			timeout.Inc()
		case errors.Is(err, fasthttp.ErrBodyTooLarge), errors.Is(err, fasthttp.ErrGetOnly):
		default:
			framing.Inc()
		}
		next(ctx, err)
	}
}

// recoverPanics answers a handler's panic with a 500 problem and logs it
// with its stack. fasthttp does not recover them: one would end the
// process, and every request in it. An ingest that panicked after its
// write is answered from the store when the provider retries; an admin
// POST's Idempotency-Key is given up as after any 5xx (runClaimed), so
// that the retry runs again.
func recoverPanics(log *slog.Logger, counted prometheus.Counter) fiber.Handler {
	return func(c *fiber.Ctx) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("a request handler panicked", "method", c.Method(), "path", c.Path(),
					"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				counted.Inc()
				err = fiber.ErrInternalServerError
			}
		}()
		return c.Next()
	}
}
