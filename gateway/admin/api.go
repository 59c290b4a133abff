package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"hookgate/gateway/config"
	"hookgate/gateway/problem"
	"hookgate/storage"
)

// An admin request body is bounded by the larger of adminMinBodyLimit and
// server.max_body plus adminEnvelope: room for a published event's payload
// inside its JSON envelope.
const (
	adminMinBodyLimit = 1 << 20
	adminEnvelope     = 64 << 10
)

// BodyLimit is the largest request body the admin listener reads, for a
// gateway whose server.max_body is maxBody.
func BodyLimit(maxBody int64) int { return max(adminMinBodyLimit, int(maxBody)+adminEnvelope) }

// List pages (SPEC section 5: ?limit= is 1..MaxPageLimit).
const (
	defaultPageLimit = 50
	MaxPageLimit     = 1000
)

// API is the admin API under /api/v1 (SPEC section 5): what its handlers
// share. Handlers live in one file per resource.
type API struct {
	d      Deps
	tokens []adminToken
	// catalogMu serialises the read-modify-write of endpoints and sources,
	// so two concurrent changes of one resource never lose each other's
	// fields and an id is created once.
	catalogMu sync.Mutex
}

// New returns the admin API of the gateway d describes, authenticating
// with the tokens of d.Config.Admin.
func New(d Deps) *API {
	return &API{d: d, tokens: hashTokens(d.Config.Admin.Tokens)}
}

// Routes registers the API on r (the admin listener's /api/v1). The
// OpenAPI document is public; everything after the middlewares needs a
// token, and every POST route honours Idempotency-Key (a path or method
// the API does not have claims no key). openapi.json lists exactly these
// routes (a test holds them together). r's app must answer errors with
// ErrorHandler and encode JSON with JSONEncoder.
func (a *API) Routes(r fiber.Router) {
	r.Get("/openapi.json", a.openapi)
	r.Use(a.authenticate, refuseQueryOfChanges)
	post := func(path string, h fiber.Handler) { r.Post(path, a.idempotent, h) }

	r.Get("/stats", a.getStats)

	r.Get("/events", a.listEvents)
	post("/events", a.publishEvent)
	r.Get("/events/:id", a.getEvent)
	post("/events/:id/replay", a.replayEvent)

	r.Get("/deliveries", a.listDeliveries)
	r.Get("/deliveries/:id", a.getDelivery)
	post("/deliveries/:id/retry", a.retryDelivery)

	r.Get("/endpoints", a.listEndpoints)
	post("/endpoints", a.createEndpoint)
	r.Get("/endpoints/:id", a.getEndpoint)
	r.Patch("/endpoints/:id", a.patchEndpoint)
	r.Delete("/endpoints/:id", a.deleteEndpoint)
	post("/endpoints/:id/rotate-secret", a.rotateEndpointSecret)
	r.Get("/endpoints/:id/stats", a.getEndpointStats)

	r.Get("/sources", a.listSources)
	post("/sources", a.createSource)
	r.Get("/sources/:id", a.getSource)
	r.Patch("/sources/:id", a.patchSource)
	r.Delete("/sources/:id", a.deleteSource)

	r.Get("/replays", a.listReplays)
	post("/replays", a.createReplay)
	r.Get("/replays/:id", a.getReplay)
}

// apiError is a problem a handler returns instead of writing it; the admin
// error handler writes it. Its detail never contains a secret or a value
// from the request that could be one: only field names and fixed text.
type apiError struct {
	problem.Details
	// retryAfter, when > 0, is sent as Retry-After (seconds).
	retryAfter int
}

func (e *apiError) Error() string { return e.Title + ": " + e.Detail }

func newAPIError(status int, slug, field, detail string) *apiError {
	return &apiError{Details: problem.Details{Type: problem.Base + slug, Title: problem.StatusText(status), Status: status, Detail: detail, Field: field}}
}

// badRequest is a request the API cannot read: malformed JSON, an unknown
// field, a wrong type, a bad query parameter.
func badRequest(field, detail string) error {
	return newAPIError(fiber.StatusBadRequest, "invalid-request", field, detail)
}

// unprocessable is a well-formed request with a value that is not valid.
func unprocessable(field, detail string) error {
	return newAPIError(fiber.StatusUnprocessableEntity, "invalid-field", field, detail)
}

// notFound is the answer for a resource that does not exist or that the
// token may not see: the two are indistinguishable on purpose.
func notFound(what string) error {
	return newAPIError(fiber.StatusNotFound, "not-found", "", "no "+what+" with this id")
}

// ErrorHandler writes apiErrors, and everything else like the public
// listener does.
func ErrorHandler(c *fiber.Ctx, err error) error {
	if ae, ok := errors.AsType[*apiError](err); ok {
		if ae.retryAfter > 0 {
			c.Set(fiber.HeaderRetryAfter, strconv.Itoa(ae.retryAfter))
		}
		return problem.Write(c, ae.Details)
	}
	return problem.ErrorHandler(c, err)
}

// catalogError is storeError for a failed write of a source or endpoint:
// it may have been stored all the same (a timeout after the write), so
// the store check reloads the registry (Gateway.registryStale).
func (a *API) catalogError(err error, what string) error {
	a.d.Registry.MarkStale()
	return a.storeError(err, what)
}

// storeError maps a store error to an answer; what is not the caller's
// fault is logged and answered 503, without its text.
func (a *API) storeError(err error, what string) error {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return notFound(what)
	case errors.Is(err, storage.ErrBadCursor):
		return badRequest("cursor", "the cursor is not one this API returned")
	case errors.Is(err, storage.ErrConflict):
		return newAPIError(fiber.StatusConflict, "conflict", "", "the "+what+" is in a state that does not allow this")
	case errors.Is(err, context.Canceled):
		return newAPIError(fiber.StatusServiceUnavailable, "cancelled", "", "the request was cancelled")
	}
	a.d.Log.Error("admin api: store error", "resource", what, "err", err)
	e := newAPIError(fiber.StatusServiceUnavailable, "store-unavailable", "", "the store failed; nothing was changed unless stated otherwise, retry later")
	e.retryAfter = 1
	return e
}

// decodeJSON reads the request body into v strictly: one JSON value,
// no unknown fields. An empty body is allowed only when optional.
func decodeJSON(c *fiber.Ctx, v any, optional bool) error {
	body := c.Request().Body()
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return badRequest("", "a JSON body is required")
	}
	// encoding/json turns each invalid byte into U+FFFD: a header or a
	// secret was stored other than sent (RFC 8259: JSON is UTF-8).
	if !utf8.Valid(body) {
		return badRequest("", "the body is not valid UTF-8")
	}
	// null decodes into nothing: a PATCH of null changed nothing, with a 200.
	if string(bytes.TrimSpace(body)) == "null" {
		return badRequest("", "the body must be a JSON object, not null")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("", "the body must be a single JSON value")
	}
	if field := nullField(body); field != "" {
		return badRequest(field, "must not be null: leave a field out to keep it (PATCH) or to take its default")
	}
	// encoding/json turns a lone surrogate escape into U+FFFD, as it does
	// an invalid byte: a secret sent as "\udcff" was stored other than sent.
	if loneSurrogate(body) && loneSurrogateOutsidePayload(body) {
		return badRequest("", "the body has a \\u escape of a lone UTF-16 surrogate, which is no character")
	}
	return nil
}

// loneSurrogateOutsidePayload reports a lone surrogate escape outside a
// publish's payload, which is kept as sent (json.RawMessage): a provider's
// JSON with a string cut inside an emoji is forwarded, as ingest does.
func loneSurrogateOutsidePayload(body []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return true
	}
	for k, v := range top {
		if !strings.EqualFold(k, "payload") && loneSurrogate(v) {
			return true
		}
	}
	return false
}

// loneSurrogate reports a \uD800-\uDFFF escape in a valid JSON text that
// is not a high surrogate followed by a low one.
func loneSurrogate(body []byte) bool {
	hex4 := func(b []byte) (rune, bool) {
		if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(b[2:6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		r, ok := hex4(body[i:])
		if !ok {
			i++ // another escape: skip its character (it may be a backslash)
			continue
		}
		i += 5
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := hex4(body[i+1:])
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 6
		}
	}
	return false
}

// nullField names the first member, or array element, of a JSON body
// whose value is null, looking into nested values but not into a publish's
// payload (the event's own JSON, which may hold nulls; its key matched as
// encoding/json matches it, whatever its case). null is no field's value:
// encoding/json reads it as "absent", so a PATCH that meant to clear a
// filter with it was answered 200 and changed nothing. One pass over the
// tokens: a walk that parsed each nested value again took a core for over
// a minute on a deep 1 MiB body.
func nullField(body []byte) string {
	type frame struct {
		obj     bool
		wantKey bool   // obj: the next token is a key or the end
		name    string // obj: the member being read
		n       int    // array: the element being read
	}
	var stack []*frame
	path := func() string {
		var b strings.Builder
		for i, f := range stack {
			switch {
			case !f.obj:
				fmt.Fprintf(&b, "[%d]", f.n)
			case i > 0:
				b.WriteString("." + f.name)
			default:
				b.WriteString(f.name)
			}
		}
		return b.String()
	}
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		if f := stack[len(stack)-1]; f.obj {
			f.wantKey = true
		} else {
			f.n++
		}
	}
	inPayload := func() bool {
		return len(stack) > 0 && stack[0].obj && strings.EqualFold(stack[0].name, "payload")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if len(stack) > 0 && stack[len(stack)-1].obj && stack[len(stack)-1].wantKey {
			if key, ok := tok.(string); ok {
				stack[len(stack)-1].name, stack[len(stack)-1].wantKey = key, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			stack = append(stack, &frame{obj: tok == json.Delim('{'), wantKey: tok == json.Delim('{')})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		case nil:
			if !inPayload() {
				return path()
			}
		}
		valueDone()
	}
}

// refuseQueryOfChanges answers 400 to a POST, PATCH or DELETE with a
// query parameter: none takes one, and one ignored changed the meaning
// silently (POST /events/{id}/replay?endpoints=a replayed to every
// endpoint).
func refuseQueryOfChanges(c *fiber.Ctx) error {
	if c.Method() == fiber.MethodGet || c.Method() == fiber.MethodHead {
		return c.Next()
	}
	if len(c.Request().URI().QueryString()) > 0 {
		var name string
		c.Context().QueryArgs().VisitAll(func(k, _ []byte) {
			if name == "" {
				name = string(k)
			}
		})
		return badRequest(truncate(name, 64), "is not a query parameter of this route; it takes none")
	}
	return c.Next()
}

// jsonError turns a decoding error into a problem naming the field.
func jsonError(err error) error {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return badRequest("", fmt.Sprintf("the body is not valid JSON (at byte %d)", se.Offset))
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if te.Field == "" {
			return badRequest("", "the body must be a JSON "+jsonKind(te.Type.Kind().String()))
		}
		return badRequest(te.Field, "must be a JSON "+jsonKind(te.Type.Kind().String()))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ = strconv.Unquote(name)
		return badRequest(name, "unknown field")
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return badRequest("", "the body is not valid JSON (truncated)")
	}
	return badRequest("", "the body is not valid JSON")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "map", "struct", "ptr":
		return "object"
	}
	return "number"
}

// page is the pagination and time window of a list request.
type page struct {
	limit        int
	cursor       string
	since, until time.Time
}

// parsePage reads ?limit=&cursor=, and ?since=&until= when the route's
// filters (the other query parameters it takes) name them. Any other
// parameter, or one given twice, is 400: a misspelt filter (?state= for
// ?status=) listed everything, as if it matched.
func parsePage(c *fiber.Ctx, filters ...string) (page, error) {
	p := page{limit: defaultPageLimit, cursor: c.Query("cursor")}
	if err := checkQuery(c, filters); err != nil {
		return p, err
	}
	if s := c.Query("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageLimit {
			return p, badRequest("limit", fmt.Sprintf("must be an integer from 1 to %d", MaxPageLimit))
		}
		p.limit = n
	}
	var err error
	if p.since, err = queryTime(c, "since"); err != nil {
		return p, err
	}
	if p.until, err = queryTime(c, "until"); err != nil {
		return p, err
	}
	if !p.since.IsZero() && !p.until.IsZero() && p.since.After(p.until) {
		return p, badRequest("since", "must not be after until")
	}
	return p, nil
}

// checkQuery refuses query parameters other than limit, cursor and
// filters, and any given more than once.
func checkQuery(c *fiber.Ctx, filters []string) error {
	var err error
	seen := map[string]bool{}
	c.Context().QueryArgs().VisitAll(func(k, _ []byte) {
		name := string(k)
		switch {
		case err != nil:
		case name != "limit" && name != "cursor" && !slices.Contains(filters, name):
			takes := strings.Join(append([]string{"limit", "cursor"}, filters...), ", ")
			err = badRequest(truncate(name, 64), "is not a query parameter of this route; it takes "+takes)
		case seen[name]:
			err = badRequest(name, "must be given once")
		}
		seen[name] = true
	})
	return err
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func queryTime(c *fiber.Ctx, name string) (time.Time, error) {
	s := c.Query(name)
	if s == "" {
		return time.Time{}, nil
	}
	t, err := parseRFC3339(s)
	if err != nil {
		return time.Time{}, badRequest(name, "must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
	}
	if t.IsZero() && name == "until" {
		return time.Time{}, badRequest(name, zeroTimeDetail)
	}
	return t, nil
}

// parseRFC3339 parses an RFC 3339 time. RFC 3339 (section 5.6) lets the
// "T" and "Z" be lowercase, which time.Parse refuses; no other letter can
// appear in a valid value.
func parseRFC3339(s string) (time.Time, error) {
	return time.Parse(time.RFC3339Nano, strings.Map(func(r rune) rune {
		switch r {
		case 't':
			return 'T'
		case 'z':
			return 'Z'
		}
		return r
	}, s))
}

// zeroTimeDetail refuses 0001-01-01T00:00:00Z, the zero time, as until:
// taken as given it is "no bound", and a POST /replays with only that
// until replayed every event. (As since, "no bound" is what it means.)
const zeroTimeDetail = "is the zero time (0001-01-01T00:00:00Z), which would mean no bound: leave it out for none"

// List is the answer of every list route.
type List[T any] struct {
	Data       []T    `json:"data"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// JSONEncoder encodes an answer without encoding/json's HTML
// escaping: no answer is HTML, and the escapes made an XML or HTML event
// body (SendGrid's inbound parse, SOAP-style providers) about five times
// its size in GET /events.
func JSONEncoder(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// pageByID pages a slice sorted by ID in memory (endpoints and sources,
// which the store lists whole): the cursor is the list's kind and the
// last ID of a page, so one list's cursor is refused by another rather
// than read as an ID to start after.
func pageByID[T any](items []T, kind string, id func(*T) string, p page) (List[T], error) {
	after := ""
	if p.cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(p.cursor)
		rest, ok := bytes.CutPrefix(b, []byte(kind+":"))
		if err != nil || !ok || !config.IDPattern.Match(rest) {
			return List[T]{}, badRequest("cursor", "the cursor is not one this API returned for this list")
		}
		after = string(rest)
	}
	out := List[T]{Data: make([]T, 0, min(len(items), p.limit))}
	for i := range items {
		if id(&items[i]) <= after {
			continue
		}
		if len(out.Data) == p.limit {
			out.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + id(&out.Data[len(out.Data)-1])))
			break
		}
		out.Data = append(out.Data, items[i])
	}
	return out, nil
}

// apiTime formats a time for an answer: RFC 3339 in UTC; "" for zero.
func apiTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// now is the API's clock.
func (a *API) now() time.Time { return time.Now().UTC() }

// writeContext bounds a store write that must not be cut short by the
// client going away halfway through a change.
func writeContext(c *fiber.Ctx) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(c.UserContext()), 10*time.Second)
}
