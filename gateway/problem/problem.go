// Package problem writes RFC 9457 problem details (application/problem+json),
// the body of every error answer of the ingest and the admin listeners.
// Both surfaces import it, so an answer reads the same on either.
package problem

import (
	"encoding/json"
	"strconv"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
)

// Base prefixes every problem type; the slug after it names the case.
const Base = "https://hookgate.dev/problems/"

// Details is an RFC 9457 problem detail, the body of every error answer.
type Details struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Field names the request field at fault, for validation errors.
	Field string `json:"field,omitempty"`
}

// Answer writes a problem+json answer. detail must never contain a secret:
// callers pass fixed text or names of fields, not values.
func Answer(c *fiber.Ctx, status int, slug, title, detail string) error {
	return Write(c, Details{Type: Base + slug, Title: title, Status: status, Detail: detail})
}

// Write writes p as the answer, with p.Status as its status.
func Write(c *fiber.Ctx, p Details) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, "application/problem+json")
	return c.Status(p.Status).Send(b)
}

// Unavailable answers 503 with Retry-After: the store could not persist.
func Unavailable(c *fiber.Ctx, retryAfter int) error {
	c.Set(fiber.HeaderRetryAfter, strconv.Itoa(retryAfter))
	return Answer(c, fiber.StatusServiceUnavailable, "store-unavailable", "Service Unavailable",
		"the event could not be stored durably; nothing was accepted, retry later")
}

// ErrorHandler turns errors that escape handlers (and Fiber's own, such as
// a body over the limit) into problem+json without echoing input.
func ErrorHandler(c *fiber.Ctx, err error) error {
	status := fiber.StatusInternalServerError
	title := "Internal Server Error"
	slug := "internal"
	if fe, ok := err.(*fiber.Error); ok {
		status = fe.Code
		title = StatusText(fe.Code)
		slug = Slug(fe.Code)
	}
	return Answer(c, status, slug, title, errorDetail(status))
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

// StatusText is the reason phrase of code, "Error" for one without.
func StatusText(code int) string {
	if t := utils.StatusMessage(code); t != "" {
		return t
	}
	return "Error"
}

// Slug names the problem of a status that Fiber or the HTTP server
// raises before a handler runs.
func Slug(code int) string {
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
