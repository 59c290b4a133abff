package gateway

import (
	"bytes"
	"errors"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"hookgate/gateway/problem"
	"hookgate/inbound"
	"hookgate/storage"
)

// unstoredHeaders are request headers never written to the store: they
// authenticate to intermediaries and are nobody's business later.
// Besides the standard ones, the custom headers that senders whose only
// authentication is a static key put it in (as fasthttp spells them), and
// see unstored.
var unstoredHeaders = map[string]bool{
	"Authorization": true, "Cookie": true, "Proxy-Authorization": true,
	"X-Api-Key": true, "Api-Key": true,
}

// unstored reports whether a request header is kept out of the store:
// those of unstoredHeaders, and every name ending in -Token or -Secret
// (GitLab's X-Gitlab-Token is its webhook secret, Asana's X-Hook-Secret
// the key it signs with). A -Key suffix is not enough: Bitbucket names its
// event type X-Event-Key.
func unstored(name []byte) bool {
	return unstoredHeaders[string(name)] || bytes.HasSuffix(name, []byte("-Token")) || bytes.HasSuffix(name, []byte("-Secret"))
}

// ingest handles POST /ingest/{source}: verify, dedupe, persist, answer.
// The 202 is written only after the event and its deliveries are durable.
func (g *Gateway) ingest(c *fiber.Ctx) error {
	snap, done := g.reg.use()
	defer done()
	src := snap.sources[c.Params("source")]
	if src == nil {
		g.metrics.ingest("", "unknown_source")
		return problem.Answer(c, fiber.StatusNotFound, "unknown-source", "Not Found", "no source with this id")
	}
	in := inbound.Inbound{
		Header:      inbound.HeaderFunc(func(n string) string { return c.Get(n) }),
		Query:       func(n string) string { return c.Query(n) },
		Body:        c.Request().Body(), // raw: Fiber's c.Body() would decode gzip
		ContentType: string(c.Request().Header.ContentType()),
		Headers:     requestHeaders(c),
	}
	res, err := g.recv.Receive(c.UserContext(), src, snap.byTenant[src.Tenant], in)
	if err != nil {
		return g.ingestError(c, src.ID, err)
	}
	return g.answerAccepted(c, src.ID, res)
}

// answerAccepted writes an accepted (or replayed) answer and wakes the
// dispatcher for the new deliveries.
func (g *Gateway) answerAccepted(c *fiber.Ctx, source string, res inbound.Received) error {
	switch {
	case res.Handshake:
		g.metrics.ingest(source, "handshake")
	case res.Replayed:
		c.Set(inbound.HeaderReplayed, "true")
		g.metrics.ingest(source, "replayed")
	default:
		g.metrics.ingest(source, "accepted")
		if ids := res.Pending(); len(ids) > 0 {
			g.disp.Notify(ids...)
		}
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(res.Status).Send(res.Body)
}

// refuseEncodedBodies answers 415 to a request body with a
// Content-Encoding other than identity. Fiber's c.Body() would inflate
// gzip, deflate and br without any limit and before the signature check
// (a 2 KiB request became a 2 MiB event past server.max_body), and store
// the inflated bytes, or the decoder's error text, instead of the raw
// body. Providers do not compress webhooks; one that does is refused
// before anything is stored, and retries.
func refuseEncodedBodies(c *fiber.Ctx) error {
	enc := strings.TrimSpace(string(c.Request().Header.ContentEncoding()))
	if enc != "" && !strings.EqualFold(enc, "identity") {
		return problem.Answer(c, fiber.StatusUnsupportedMediaType, "unsupported-content-encoding",
			"Unsupported Media Type", "request bodies must not be compressed (Content-Encoding: identity)")
	}
	return c.Next()
}

// publicError answers the errors Fiber raises before the ingest handler
// runs; a body over server.max_body is an ingest outcome, too_large.
func (g *Gateway) publicError(c *fiber.Ctx, err error) error {
	if fe, ok := err.(*fiber.Error); ok && fe.Code == fiber.StatusRequestEntityTooLarge {
		g.countRefused(c, "too_large")
	}
	return problem.ErrorHandler(c, err)
}

// countRefusedEncodings counts the ingests refuseEncodedBodies refuses
// (outcome encoded).
func (g *Gateway) countRefusedEncodings(c *fiber.Ctx) error {
	if enc := strings.TrimSpace(string(c.Request().Header.ContentEncoding())); enc != "" && !strings.EqualFold(enc, "identity") && c.Method() == fiber.MethodPost {
		g.countRefused(c, "encoded")
	}
	return c.Next()
}

// countRefused counts an ingest refused before its handler ran, under its
// source when that exists (a path of any other name is not a label: the
// series would be the sender's to multiply).
func (g *Gateway) countRefused(c *fiber.Ctx, outcome string) {
	id, ok := strings.CutPrefix(string(c.Request().URI().Path()), "/ingest/")
	if !ok {
		return
	}
	if g.reg.current().sources[id] == nil {
		id = ""
	}
	g.metrics.ingest(id, outcome)
}

// checkFraming guards the request's framing against smuggling.
//
// A Content-Length sent more than once is 400, and the connection is
// closed (RFC 9112 section 6.3): fasthttp takes the last value, so a
// proxy in front that took the first would see the requests on the
// connection end elsewhere, and the tail of a body was read as a second
// request.
//
// A chunked request closes its connection after the answer. One that also
// carried a Content-Length is ambiguous (RFC 9112 section 6.1: the server
// must close the connection), and telling it apart after fasthttp has
// parsed the chunks is not possible, so every chunked request ends its
// connection: bytes after the chunked body are never read as a second
// request. Providers rarely chunk, so this costs little.
//
// fasthttp reads a body under any Transfer-Encoding but identity as plain
// chunked: a "gzip, chunked" body was stored and delivered as its
// compressed bytes (while Content-Encoding: gzip is 415). A transfer
// coding other than chunked is 501, and chunked not last is 400 (RFC 9112
// sections 6.1 and 6.3), read from the raw header block: fasthttp rewrites
// the parsed header to "chunked".
//
// fasthttp is lenient where a proxy in front may read the same bytes
// otherwise (RFC 9112 sections 3.2, 5.1, 5.2): a bare CR or a NUL in a
// header line, whitespace before a colon or a folded line, an empty name,
// a Host sent twice or (HTTP/1.1) not at all. Each is 400, and so is a
// Content-Type sent twice: fasthttp keeps the last, the event would be
// stored and delivered with a type a proxy in front did not see.
func checkFraming(counted prometheus.Counter) fiber.Handler {
	return func(c *fiber.Ctx) error {
		raw := c.Request().Header.RawHeaders()
		f := readFraming(raw)
		status, detail := 0, ""
		switch n := len(f.codings); {
		case f.malformed:
			status, detail = fiber.StatusBadRequest, "a header line is malformed"
		case f.hosts > 1 || f.hosts == 0 && c.Request().Header.IsHTTP11():
			status, detail = fiber.StatusBadRequest, "Host must be sent once"
		case f.contentLengths > 1:
			status, detail = fiber.StatusBadRequest, "Content-Length is sent more than once"
		case f.contentTypes > 1:
			status, detail = fiber.StatusBadRequest, "Content-Type is sent more than once"
		case f.transferEncodings > 0 && (n == 0 || f.codings[n-1] != "chunked"):
			// fasthttp reads even an empty Transfer-Encoding as chunked.
			status, detail = fiber.StatusBadRequest, "chunked must be the last transfer coding"
		case n > 1:
			status, detail = fiber.StatusNotImplemented, "no transfer coding but chunked is supported"
		case c.Request().Header.ContentLength() == -1 && hasTrailerFields(&c.Request().Header, raw):
			status, detail = fiber.StatusBadRequest, "trailer fields after a chunked body are not accepted"
		}
		if status != 0 {
			counted.Inc()
			c.Context().SetConnectionClose()
			return problem.Answer(c, status, problem.Slug(status), problem.StatusText(status), detail)
		}
		if c.Request().Header.ContentLength() == -1 {
			c.Context().SetConnectionClose()
		}
		return c.Next()
	}
}

// hasTrailerFields reports whether the parsed header h holds more fields
// of some name than the raw header block: fasthttp merges the trailer
// section of a chunked body into the header, where a signature, an event
// ID or a stored header would be read from it (RFC 9110 section 6.5.1:
// never merge trailers into the header), unseen by a proxy in front that
// checked the header section. Connection is left out: fasthttp reports
// its own view of it. The fields fasthttp keeps apart, once and only when
// not empty (heldOnce), count as sent at most once: an empty or a repeated
// User-Agent left room for a User-Agent trailer.
func hasTrailerFields(h *fasthttp.RequestHeader, raw []byte) bool {
	sent := make(map[string]int)
	for line := range bytes.Lines(raw) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		n := strings.ToLower(string(name))
		switch {
		case !heldOnce[n]:
			sent[n]++
		case len(bytes.TrimSpace(value)) > 0:
			sent[n] = 1
		}
	}
	extra := false
	parsed := make(map[string]int)
	h.VisitAll(func(k, _ []byte) {
		name := strings.ToLower(string(k))
		parsed[name]++
		if name != "connection" && parsed[name] > sent[name] {
			extra = true
		}
	})
	return extra
}

// heldOnce are the request fields fasthttp's header keeps in a field of
// their own, which VisitAll reports once, and only when not empty.
var heldOnce = map[string]bool{"user-agent": true, "cookie": true, "content-type": true, "host": true}

// framing is what a raw header block says of its body's framing: how many
// Content-Length, Content-Type and Host lines it has, the codings of its
// Transfer-Encoding lines in order, lower-cased (nil for none, nearly
// always), and whether a line is malformed.
type framing struct {
	contentLengths    int
	contentTypes      int
	hosts             int
	transferEncodings int // Transfer-Encoding lines, whatever they name
	codings           []string
	malformed         bool
}

func readFraming(raw []byte) framing {
	var f framing
	for line := range bytes.Lines(raw) {
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) == 0 {
			continue
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(name) == 0 || bytes.ContainsAny(line, "\r\x00") ||
			isBlank(name[0]) || isBlank(name[len(name)-1]) { // a folded line; space before the colon
			f.malformed = true
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			f.contentLengths++
		case bytes.EqualFold(name, []byte("Host")):
			f.hosts++
		case bytes.EqualFold(name, []byte("Content-Type")):
			f.contentTypes++
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			f.transferEncodings++
			for coding := range bytes.SplitSeq(value, []byte(",")) {
				if coding = bytes.TrimSpace(coding); len(coding) > 0 {
					f.codings = append(f.codings, strings.ToLower(string(coding)))
				}
			}
		}
	}
	return f
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// ingestError maps Receive's errors to answers. Nothing is stored on any of
// these paths.
func (g *Gateway) ingestError(c *fiber.Ctx, source string, err error) error {
	switch {
	case errors.Is(err, inbound.ErrMissingSignature), errors.Is(err, inbound.ErrBadSignature), errors.Is(err, inbound.ErrStaleTimestamp):
		g.metrics.ingest(source, "unauthorized")
		detail := "the request signature is missing or does not match"
		if errors.Is(err, inbound.ErrStaleTimestamp) {
			detail = "the signed timestamp is outside the tolerance"
		}
		return problem.Answer(c, fiber.StatusUnauthorized, "invalid-signature", "Unauthorized", detail)
	case errors.Is(err, storage.ErrIdempotencyMismatch):
		g.metrics.ingest(source, "mismatch")
		return problem.Answer(c, fiber.StatusUnprocessableEntity, "idempotency-key-reused", "Unprocessable Entity",
			"this event id was already received with a different body")
	case errors.Is(err, inbound.ErrEventIDTooLong):
		g.metrics.ingest(source, "bad_request")
		return problem.Answer(c, fiber.StatusBadRequest, "event-id-too-long", "Bad Request", "the event id or type is longer than 512 bytes")
	default:
		g.metrics.ingest(source, "store_error")
		g.log.Error("ingest not stored", "source", source, "err", err)
		g.storeFailed(err)
		return problem.Unavailable(c, 1)
	}
}

// requestHeaders copies the request headers worth keeping with the event.
// fasthttp has already put the names in canonical form. Every kept name and
// value is copied into one string that the map's entries slice: one copy per
// request instead of two allocations per header (it was the ingest path's
// biggest allocator).
func requestHeaders(c *fiber.Ctx) map[string]string {
	hdr := &c.Request().Header
	size := 0
	hdr.VisitAll(func(k, v []byte) { size += len(k) + len(v) })
	var b strings.Builder
	b.Grow(size)
	var ends [24][2]int // where each kept name and value ends in b
	spans := ends[:0]
	hdr.VisitAll(func(k, v []byte) {
		if unstored(k) {
			return
		}
		b.Write(k)
		n := b.Len()
		b.Write(v)
		spans = append(spans, [2]int{n, b.Len()})
	})
	all := b.String()
	h := make(map[string]string, len(spans))
	start := 0
	for _, sp := range spans {
		name, value := all[start:sp[0]], all[sp[0]:sp[1]]
		if old, ok := h[name]; ok {
			value = old + ", " + value
		}
		h[name] = value
		start = sp[1]
	}
	return h
}
