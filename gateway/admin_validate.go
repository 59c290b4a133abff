package gateway

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"hookgate/outbound"
	"hookgate/storage"

	"github.com/gofiber/fiber/v2"
)

// Validation shared by the admin API's resources: the rules config.yaml
// applies (SPEC section 2), answered as problems naming the field. No
// problem quotes a value that could be a secret.

// naming says which resource a validation problem is about, as a config
// error names the entry's id: "endpoint ep_1: must be …". Only an id of
// valid syntax is named (anything else could be any text the caller sent);
// other errors pass unchanged.
func naming(err error, kind, id string) error {
	ae, ok := errors.AsType[*apiError](err)
	if !ok || (ae.Status != fiber.StatusBadRequest && ae.Status != fiber.StatusUnprocessableEntity) || !idPattern.MatchString(id) {
		return err
	}
	named := *ae
	named.Detail = kind + " " + id + ": " + ae.Detail
	return &named
}

// quoteID is an id of valid syntax quoted and followed by a space, for a
// problem's detail; "" for anything else.
func quoteID(id string) string {
	if !idPattern.MatchString(id) {
		return ""
	}
	return strconv.Quote(id) + " "
}

// checkID checks the syntax of a source or endpoint id: a URL path segment.
func checkID(id string) error {
	if !idPattern.MatchString(id) {
		return unprocessable("id", "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	return nil
}

// checkTenant checks the tenant of a new resource: required, and the
// token's own for a tenant-scoped token.
func checkTenant(p principal, tenant string) error {
	switch {
	case tenant == "":
		return unprocessable("tenant", "must not be empty")
	case !idPattern.MatchString(tenant):
		return unprocessable("tenant", tenantRule)
	case !p.sees(tenant):
		return unprocessable("tenant", "must be the tenant of your token")
	}
	return nil
}

// cmpOrTenant is the tenant of a resource created without one: the
// token's, or DefaultTenant for the operator (as in config.yaml).
func cmpOrTenant(p principal) string {
	if p.operator() {
		return DefaultTenant
	}
	return p.tenant
}

// Bounds of an endpoint's settings, in config.yaml and the admin API alike:
// every event is matched against the event_types of every endpoint of its
// tenant, and every delivery carries its endpoint's URL and headers, on a
// gateway the tenants share. Unbounded, one tenant's endpoint with 60,000
// globs cost every ingest of that tenant ~0.3 s of CPU.
const (
	maxEventTypes     = 256     // globs of one endpoint, each at most maxTypeGlob bytes
	maxURLBytes       = 4096    // an endpoint URL (servers refuse much longer request lines)
	maxStaticHeaders  = 64      // static headers of one endpoint
	maxStaticHeaderKB = 8 << 10 // their names and values together, in bytes
)

// eventTypesProblem says what is wrong with an endpoint's event_types
// beyond each glob's syntax: the field at fault (i is -1 for the list) and
// why; "" when nothing is.
func eventTypesProblem(globs []string) (i int, problem string) {
	if len(globs) > maxEventTypes {
		return -1, fmt.Sprintf("has %d globs, more than the %d an endpoint may have", len(globs), maxEventTypes)
	}
	for i, g := range globs {
		if len(g) > maxTypeGlob {
			return i, fmt.Sprintf("is %d bytes, more than the %d a glob may have", len(g), maxTypeGlob)
		}
	}
	return 0, ""
}

// headersProblem says what is wrong with the size of an endpoint's static
// headers, "" when nothing is.
func headersProblem(h map[string]string) string {
	size := 0
	for k, v := range h {
		size += len(k) + len(v)
	}
	switch {
	case len(h) > maxStaticHeaders:
		return fmt.Sprintf("has %d headers, more than the %d an endpoint may have", len(h), maxStaticHeaders)
	case size > maxStaticHeaderKB:
		return fmt.Sprintf("names and values are %d bytes together, more than %d", size, maxStaticHeaderKB)
	}
	return ""
}

// checkURL accepts absolute http(s) URLs with a host, a port if any in
// 1-65535, and no user info (config.yaml's rule too).
func checkURL(raw string) error {
	if raw == "" {
		return unprocessable("url", "required")
	}
	if p := urlProblem(raw); p != "" {
		return unprocessable("url", p)
	}
	return nil
}

// urlProblem says what is wrong with an endpoint URL, "" if nothing. It
// never quotes the URL: it may carry credentials.
func urlProblem(raw string) string {
	if len(raw) > maxURLBytes {
		return fmt.Sprintf("is %d bytes, more than %d", len(raw), maxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "is not a valid URL"
	}
	port, perr := strconv.Atoi(cmp.Or(u.Port(), "1"))
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "must be an absolute http:// or https:// URL"
	case u.Hostname() == "":
		return "must have a host"
	case perr != nil || port < 1 || port > 65535:
		return "has a port outside 1-65535"
	case u.User != nil:
		return "must not contain user info; put credentials in headers"
	case strings.ContainsRune(u.RawQuery, ' '):
		return "has a space in its query; write it as %20"
	case !sendable(raw):
		return "is not a URL a request can be sent to (an invalid internationalized host, or characters no server reads in a request line)"
	}
	return ""
}

// sendable reports whether net/http can write a request to raw, and an
// HTTP server read it back: a host that is not ASCII must pass IDNA's
// lookup profile, as net/http applies it when it writes the request, and
// the request line must parse (net/http sends a query as written).
func sendable(raw string) bool {
	req, err := http.NewRequest(http.MethodPost, raw, nil)
	if err != nil {
		return false
	}
	var b bytes.Buffer
	if req.Write(&b) != nil {
		return false
	}
	_, err = http.ReadRequest(bufio.NewReader(&b))
	return err == nil
}

// blockedTarget reports why every delivery to raw would be refused at dial
// time when private targets are not allowed: its host is a literal
// loopback, private, link-local or otherwise blocked address, or localhost
// (RFC 6761). A hostname is resolved, and checked, only when dialled.
func blockedTarget(raw string) (reason string, blocked bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", false
	}
	// The host net/http dials: "１２７．０．０．１" and "ⓛocalhost" map to
	// 127.0.0.1 and localhost.
	host := strings.ToLower(strings.TrimSuffix(outbound.ASCIIHost(u.Hostname()), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return "loopback", true
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return "", false
	}
	return outbound.Blocked(addr)
}

// checkTarget refuses, at creation, an endpoint every delivery to which
// would be refused: better a 422 now than a delivery failing for a day.
func (a *adminAPI) checkTarget(raw string) error {
	if a.g.cfg.Delivery.AllowPrivateTargets {
		return nil
	}
	if reason, blocked := blockedTarget(raw); blocked {
		return unprocessable("url", "points at a "+reason+" address, and delivery.allow_private_targets is false: every delivery would be refused")
	}
	return nil
}

func checkHeaders(h map[string]string) error {
	if p := headersProblem(h); p != "" {
		return unprocessable("headers", p)
	}
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(h)) {
		field := "headers." + name
		lower := strings.ToLower(name)
		switch {
		case !validHeaderName(name):
			return unprocessable("headers", "contains a name that is not a valid header name")
		case slices.Contains(reservedHeaders, lower) || hasAnyPrefix(lower, reservedHeaderPrefixes):
			return unprocessable(field, "is set by hookgate and cannot be overridden")
		case seen[lower]:
			return unprocessable(field, "duplicate header (names are case-insensitive)")
		case !validHeaderValue(h[name]):
			return unprocessable(field, "value contains control characters or line breaks")
		}
		seen[lower] = true
	}
	return nil
}

// checkRetry applies the config's rules to a retry policy.
func checkRetry(r storage.RetryPolicy) error {
	switch {
	case r.Multiplier < 1:
		return unprocessable("retry.multiplier", "must be at least 1")
	case r.Randomization < 0 || r.Randomization > 1:
		return unprocessable("retry.randomization", "must be between 0 and 1")
	case r.MaxAttempts < 1:
		return unprocessable("retry.max_attempts", "must be at least 1")
	case r.InitialInterval > r.MaxInterval:
		return unprocessable("retry.initial_interval", "must not exceed retry.max_interval")
	}
	return nil
}

// indexedField is key[i], or key itself for i < 0.
func indexedField(key string, i int) string {
	if i < 0 {
		return key
	}
	return fmt.Sprintf("%s[%d]", key, i)
}
