package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// problemBase prefixes every problem type; the slug after it names the case.
const problemBase = "https://hookgate.dev/problems/"

// Problem is an RFC 9457 problem detail, the body of every error answer.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Field names the request field at fault, for validation errors.
	Field string `json:"field,omitempty"`
}

// problem writes a problem+json answer. detail must never contain a secret:
// callers pass fixed text or names of fields, not values.
func problem(c *fiber.Ctx, status int, slug, title, detail string) error {
	return writeProblem(c, Problem{Type: problemBase + slug, Title: title, Status: status, Detail: detail})
}

func writeProblem(c *fiber.Ctx, p Problem) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, "application/problem+json")
	return c.Status(p.Status).Send(b)
}

// unavailable answers 503 with Retry-After: the store could not persist.
func unavailable(c *fiber.Ctx, retryAfter int) error {
	c.Set(fiber.HeaderRetryAfter, strconv.Itoa(retryAfter))
	return problem(c, fiber.StatusServiceUnavailable, "store-unavailable", "Service Unavailable",
		"the event could not be stored durably; nothing was accepted, retry later")
}

// errorHandler turns errors that escape handlers (and Fiber's own, such as
// a body over the limit) into problem+json without echoing input.
func errorHandler(c *fiber.Ctx, err error) error {
	status := fiber.StatusInternalServerError
	title := "Internal Server Error"
	slug := "internal"
	if fe, ok := err.(*fiber.Error); ok {
		status = fe.Code
		title = statusText(fe.Code)
		slug = problemSlug(fe.Code)
	}
	return problem(c, status, slug, title, errorDetail(status))
}

// errorDetail explains the errors that Fiber raises before a handler runs.
// Fiber's own messages are not used: they echo the request's path.
func errorDetail(status int) string {
	switch status {
	case fiber.StatusRequestEntityTooLarge:
		return "the request body is larger than the configured limit"
	case fiber.StatusNotFound:
		return "no route for this method and path"
	case fiber.StatusMethodNotAllowed:
		return "this route does not take this method"
	case fiber.StatusBadRequest:
		return "the request could not be parsed"
	case fiber.StatusInternalServerError:
		return "the gateway failed to answer; its log has the cause"
	}
	if status >= 500 {
		return "the gateway could not answer"
	}
	return "the request was refused"
}

func statusText(code int) string {
	if t := utils.StatusMessage(code); t != "" {
		return t
	}
	return "Error"
}

func problemSlug(code int) string {
	switch code {
	case fiber.StatusRequestEntityTooLarge:
		return "body-too-large"
	case fiber.StatusNotFound:
		return "not-found"
	case fiber.StatusMethodNotAllowed:
		return "method-not-allowed"
	case fiber.StatusRequestHeaderFieldsTooLarge:
		return "headers-too-large"
	case fiber.StatusRequestTimeout:
		return "request-timeout"
	case fiber.StatusBadRequest:
		return "bad-request"
	case fiber.StatusNotImplemented:
		return "not-implemented"
	}
	return "http-" + strconv.Itoa(code)
}

// refuseUnknownMethods makes app answer a request whose method Fiber does
// not know (a lowercase "post", PROPFIND) with a 400 problem: Fiber's
// router answered it itself, in text/plain, before any middleware or
// error handler runs.
func refuseUnknownMethods(app *fiber.App, counted prometheus.Counter) {
	next := app.Server().Handler
	body, _ := json.Marshal(Problem{Type: problemBase + "bad-request", Title: "Bad Request",
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
