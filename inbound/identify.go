package inbound

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
)

// Limits on an expression, so that a hostile or fuzzed config stays cheap to parse and evaluate.
const (
	// MaxExprLen is the longest expression ParseExpr accepts, in bytes.
	MaxExprLen = 256
	// MaxExprParts is the most "+"-joined parts ParseExpr accepts.
	MaxExprParts = 8
)

// ErrBadExpr is wrapped by every error ParseExpr returns, so a config loader can tell a bad
// expression from other failures.
var ErrBadExpr = errors.New("bad expression")

// partKind says where a part of an expression reads its value.
type partKind uint8

const (
	partHeader partKind = iota + 1 // header:NAME
	partQuery                      // query:NAME
	partJSON                       // json:/pointer
)

// part is one "+"-separated piece of an expression.
type part struct {
	kind partKind
	name string   // header or query name; for json, the pointer as written
	alt  string   // header only: read when name is absent (svix-id for webhook-id)
	ptr  []string // json only: the decoded reference tokens
}

// Expr is a parsed event-ID or event-type expression: one or more parts (header:NAME, query:NAME,
// json:/pointer) joined with "+". The zero Expr yields nothing. Parse once at config load, evaluate
// per request.
type Expr struct {
	parts []part
}

// ParseExpr parses an expression as written in config.yaml: parts joined with "+", each one of
//
//	header:NAME        a request header; NAME is an HTTP token
//	query:NAME         a query parameter; NAME has no spaces or control characters
//	json:/a/0/b        an RFC 6901 pointer into a JSON body ("~1" is "/", "~0" is "~")
//
// "" gives the zero Expr. Prefixes are lowercase; nothing is trimmed. A name or pointer cannot
// contain "+", which always separates parts. header:webhook-id (any case) also reads svix-id when
// webhook-id is absent: Standard Webhooks senders built on Svix send the same ID under that name.
// Errors wrap ErrBadExpr and name the offending part.
func ParseExpr(s string) (Expr, error) {
	if s == "" {
		return Expr{}, nil
	}
	if len(s) > MaxExprLen {
		return Expr{}, fmt.Errorf("%w: longer than %d bytes", ErrBadExpr, MaxExprLen)
	}
	raw := strings.Split(s, "+")
	if len(raw) > MaxExprParts {
		return Expr{}, fmt.Errorf("%w: more than %d parts", ErrBadExpr, MaxExprParts)
	}
	parts := make([]part, 0, len(raw))
	for i, r := range raw {
		p, err := parsePart(r)
		if err != nil {
			return Expr{}, fmt.Errorf("%w: part %d %q: %w", ErrBadExpr, i+1, r, err)
		}
		parts = append(parts, p)
	}
	return Expr{parts: parts}, nil
}

// parsePart parses one part; the error does not repeat the part, ParseExpr adds it.
func parsePart(s string) (part, error) {
	prefix, rest, ok := strings.Cut(s, ":")
	switch {
	case s == "":
		return part{}, errors.New("empty part")
	case !ok:
		return part{}, errors.New("missing prefix (header:, query: or json:)")
	case prefix == "header":
		return parseHeaderPart(rest)
	case prefix == "query":
		return parseQueryPart(rest)
	case prefix == "json":
		return parseJSONPart(rest)
	default:
		return part{}, fmt.Errorf("unknown prefix %q (want header:, query: or json:)", prefix)
	}
}

// parseHeaderPart checks that the name is a valid HTTP field name (RFC 9110 token).
func parseHeaderPart(name string) (part, error) {
	if name == "" {
		return part{}, errors.New("empty header name")
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return part{}, fmt.Errorf("header name has invalid character %q", name[i])
		}
	}
	p := part{kind: partHeader, name: name}
	if strings.EqualFold(name, webhookIDHeader) {
		p.alt = svixIDHeader
	}
	return p, nil
}

// The Standard Webhooks message-ID header and its Svix spelling, which carries the same ID.
const (
	webhookIDHeader = "webhook-id"
	svixIDHeader    = "svix-id"
)

// parseQueryPart accepts any non-empty name without spaces or control characters.
func parseQueryPart(name string) (part, error) {
	if name == "" {
		return part{}, errors.New("empty query parameter name")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c == 0x7f {
			return part{}, fmt.Errorf("query parameter name has invalid character %q", c)
		}
	}
	return part{kind: partQuery, name: name}, nil
}

// parseJSONPart parses an RFC 6901 pointer; the whole-document pointer "" is refused because a whole
// body is never a useful ID (the SHA-256 fallback already covers it).
func parseJSONPart(ptr string) (part, error) {
	toks, err := parsePointer(ptr)
	if err != nil {
		return part{}, err
	}
	if len(toks) == 0 {
		return part{}, errors.New(`empty JSON pointer (want e.g. "json:/id")`)
	}
	return part{kind: partJSON, name: ptr, ptr: toks}, nil
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110 section 5.6.2).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// IsZero reports whether e is the empty expression, which yields nothing.
func (e Expr) IsZero() bool { return len(e.parts) == 0 }

// String returns the expression in the form ParseExpr accepts; ParseExpr(e.String()) equals e.
func (e Expr) String() string {
	var b strings.Builder
	for i, p := range e.parts {
		if i > 0 {
			b.WriteByte('+')
		}
		switch p.kind {
		case partHeader:
			b.WriteString("header:")
		case partQuery:
			b.WriteString("query:")
		case partJSON:
			b.WriteString("json:")
		}
		b.WriteString(p.name)
	}
	return b.String()
}

// Request is what an expression reads: the headers, query parameters and raw body of one ingest
// request. It remembers what it learned about its body, so build one per ingest request, use it for
// both the event-ID and the event-type expressions, and do not share it between goroutines.
type Request struct {
	// Header reads a request header by name; nil means the request has no headers.
	Header HeaderGetter
	// Query reads a query parameter by name; nil means the request has no query.
	Query func(name string) string
	// Body is the raw request body, which json: parts read as a JSON document.
	Body []byte

	// body says whether Body is valid JSON. It is decided at most once per Request, on the first
	// json: part, however many json: parts the ID and type expressions have; each part then walks
	// the validated bytes to its target without decoding the rest (see jsonpointer.go).
	body bodyState
}

// bodyState caches what a Request knows about its body.
type bodyState uint8

const (
	bodyUnchecked bodyState = iota // no json: part has read the body yet
	bodyJSON                       // the body is one valid JSON document
	bodyNotJSON                    // the body is not JSON: every json: part yields nothing
)

// header reads a header, treating a nil Header as none.
func (r *Request) header(name string) string {
	if r.Header == nil {
		return ""
	}
	return r.Header.Get(name)
}

// query reads a query parameter, treating a nil Query as none.
func (r *Request) query(name string) string {
	if r.Query == nil {
		return ""
	}
	return r.Query(name)
}

// jsonValue reads the value the pointer tokens name in the body; a body that is not valid JSON
// yields nothing, even if its start looks like JSON.
func (r *Request) jsonValue(toks []string) (string, bool) {
	if r.body == bodyUnchecked {
		r.body = bodyNotJSON
		// gjson's validator accepts exactly what encoding/json.Valid does (FuzzJSONPointer checks
		// the pair) at four times the speed; it was 6% of the gateway's CPU under load. Past
		// encoding/json's nesting limit it does not, and it recurses: tooDeep checks that first.
		if !tooDeep(r.Body) && gjson.ValidBytes(r.Body) {
			r.body = bodyJSON
		}
	}
	if r.body != bodyJSON {
		return "", false
	}
	return pointerValue(r.Body, toks)
}

// Eval evaluates e against r. A composite expression joins its parts' values with "/" and yields
// nothing unless every part yields a non-empty value: a partial key would merge distinct events.
// The zero Expr and a nil r yield nothing.
func (e Expr) Eval(r *Request) (string, bool) {
	if r == nil || len(e.parts) == 0 {
		return "", false
	}
	if len(e.parts) == 1 {
		return e.parts[0].eval(r)
	}
	var b strings.Builder
	for i, p := range e.parts {
		v, ok := p.eval(r)
		if !ok {
			return "", false
		}
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(v)
	}
	return b.String(), true
}

// eval reads one part; an empty value counts as nothing.
func (p part) eval(r *Request) (string, bool) {
	var v string
	switch p.kind {
	case partHeader:
		v = r.header(p.name)
		if v == "" && p.alt != "" {
			v = r.header(p.alt)
		}
	case partQuery:
		v = r.query(p.name)
	case partJSON:
		v, _ = r.jsonValue(p.ptr)
	}
	return v, v != ""
}

// idempotencyKeyHeader is the header EventID falls back to when the expression yields nothing.
const idempotencyKeyHeader = "Idempotency-Key"

// EventID returns the provider event ID of r that dedupe is keyed on: what e yields; when it yields
// nothing, the Idempotency-Key header; else the lowercase hex SHA-256 of the body, so that a byte
// identical redelivery is still recognised.
func EventID(e Expr, r *Request) string {
	if v, ok := e.Eval(r); ok {
		return v
	}
	if r == nil {
		r = &Request{}
	}
	if k := r.header(idempotencyKeyHeader); k != "" {
		return k
	}
	sum := sha256.Sum256(r.Body)
	return hex.EncodeToString(sum[:])
}

// DefaultEventIDExpr returns the event-ID expression a source of the given verify scheme uses when
// its config sets none (SPEC section 2); "" for schemes without a provider ID (hmac, none, unknown),
// which leaves EventID to its fallbacks. The standard-webhooks default "header:webhook-id" also
// reads svix-id, see ParseExpr.
func DefaultEventIDExpr(scheme string) string {
	switch scheme {
	case "stripe":
		return "json:/id"
	case "github":
		return "header:X-GitHub-Hook-ID+header:X-GitHub-Delivery"
	case "shopify":
		return "header:X-Shopify-Webhook-Id"
	case "slack":
		return "json:/event_id"
	case "standard-webhooks":
		return "header:webhook-id"
	}
	return ""
}

// DefaultEventTypeExpr returns the event-type expression a source of the given verify scheme uses
// when its config sets none (SPEC section 2); "" for hmac, none and unknown schemes.
func DefaultEventTypeExpr(scheme string) string {
	switch scheme {
	case "stripe", "standard-webhooks":
		return "json:/type"
	case "github":
		return "header:X-GitHub-Event"
	case "shopify":
		return "header:X-Shopify-Topic"
	case "slack":
		return "json:/event/type"
	}
	return ""
}
