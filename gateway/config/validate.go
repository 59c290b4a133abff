package config

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"hookgate/inbound"
	"hookgate/outbound"
	"hookgate/storage"
)

// resolve fills each endpoint's Timeout and Retry from delivery: a retry
// override only replaces the fields it sets.
func (d *decoder) resolve(c *Config) {
	for i := range c.Endpoints {
		e := &c.Endpoints[i]
		key := fmt.Sprintf("endpoints[%d]", i)
		if !d.set[key+".timeout"] {
			e.Timeout = c.Delivery.Timeout
		}
		if e.Retry == nil {
			e.Retry = &RetryConfig{}
		}
		d.inheritRetry(e.Retry, c.Delivery.Retry, key+".retry.")
	}
}

func (d *decoder) inheritRetry(r *RetryConfig, base RetryConfig, prefix string) {
	unset := func(field string) bool { return !d.set[prefix+field] }
	if unset("initial_interval") {
		r.InitialInterval = base.InitialInterval
	}
	if unset("multiplier") {
		r.Multiplier = base.Multiplier
	}
	if unset("max_interval") {
		r.MaxInterval = base.MaxInterval
	}
	if unset("randomization") {
		r.Randomization = base.Randomization
	}
	if unset("max_attempts") {
		r.MaxAttempts = base.MaxAttempts
	}
	if unset("max_elapsed") {
		r.MaxElapsed = base.MaxElapsed
	}
}

// fail records a validation error at key, located at the line of key or of
// its nearest ancestor present in the file. Keys (or ancestors) that already
// failed to decode are skipped: their value is not what the file says.
func (d *decoder) fail(key, format string, args ...any) {
	line, found := 0, false
	for k := key; ; k = parentKey(k) {
		if d.bad[k] {
			return
		}
		if l, ok := d.lines[k]; ok && !found {
			line, found = l, true
		}
		if k == "" {
			break
		}
	}
	d.errorf(line, key, format, args...)
}

// required reports an empty required value, unless an unset environment
// variable emptied it: that was reported already, naming the variable.
func (d *decoder) required(key, what string) {
	if len(d.unset[key]) > 0 {
		return
	}
	d.fail(key, "%s is required", what)
}

func (d *decoder) positive(key string, v Duration) {
	if v <= 0 {
		d.fail(key, "must be a duration greater than 0")
	}
}

// maxTimeout bounds a delivery attempt's timeout: an attempt holds its
// lease (the timeout and a margin, at most storage.MaxLease) and a
// max_in_flight slot that long.
const MaxTimeout = storage.MaxAttemptTimeout

func (d *decoder) timeout(key string, v Duration) {
	d.positive(key, v)
	if v.D() > MaxTimeout {
		d.fail(key, "must be at most %v", MaxTimeout)
	}
}

func (d *decoder) validate(c *Config) {
	d.listen("server.listen", c.Server.Listen)
	switch {
	case c.Server.MaxBody <= 0:
		d.fail("server.max_body", "must be greater than 0")
	case c.Server.MaxBody > storage.MaxEventBody:
		d.fail("server.max_body", "must be at most %v (the largest event the store keeps)", Size(storage.MaxEventBody))
	}
	d.listen("admin.listen", c.Admin.Listen)
	if listenersClash(c.Admin.Listen, c.Server.Listen) {
		d.fail("admin.listen", "must differ from server.listen: the admin API needs its own listener, and these two cannot both bind (one port, overlapping hosts)")
	}
	d.tokens(c.Admin.Tokens)
	d.weakToken(c.Admin)
	d.storage(c.Storage)
	d.positive("dedupe.ttl", c.Dedupe.TTL)
	d.positive("retention", c.Retention)
	d.timeout("delivery.timeout", c.Delivery.Timeout)
	d.retry(c.Delivery.Retry, "delivery.retry.", func(string) bool { return true })
	byID := d.sources(c.Sources)
	d.endpoints(c.Endpoints, byID)
	d.alerts(c.Alerts)
	d.retentionCoversRetries(c)
}

func (d *decoder) alerts(a AlertsConfig) {
	switch {
	case a.URL != "":
		d.url("alerts.url", a.URL)
	case a.Secret != "":
		d.fail("alerts.secret", "needs alerts.url: the secret signs what is sent there")
	}
	if a.Secret != "" && !ValidWhsec(a.Secret, MinEndpointSecret) {
		d.fail("alerts.secret", "must be whsec_ followed by base64 of at least %d bytes; leave it out to have one generated", MinEndpointSecret)
	}
}

// retentionCoversRetries refuses a retention shorter than a retry window:
// the retention sweep deletes events with their deliveries, so a delivery
// still retrying would vanish without ever reaching the replayable failed
// state.
func (d *decoder) retentionCoversRetries(c *Config) {
	if c.Retention <= 0 {
		return // reported as such
	}
	if c.Delivery.Retry.MaxElapsed > c.Retention {
		d.fail("retention", "must be at least delivery.retry.max_elapsed (%s): the retention sweep deletes events with their deliveries, still retrying or not",
			c.Delivery.Retry.MaxElapsed)
	}
	for i, e := range c.Endpoints {
		key := fmt.Sprintf("endpoints[%d].retry.max_elapsed", i)
		if d.set[key] && e.Retry.MaxElapsed > c.Retention {
			d.fail(key, "must not exceed retention (%s): the retention sweep deletes events with their deliveries, still retrying or not", c.Retention)
		}
	}
}

func (d *decoder) listen(key, addr string) {
	if addr == "" {
		d.required(key, "listen address")
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		d.fail(key, "must be host:port, e.g. \":8080\" or \"127.0.0.1:8081\"")
		return
	}
	if !validListenHost(host) {
		d.fail(key, "host must be empty (every address), an IP address or a host name")
	}
	// What net.Listen takes: a number or a name from /etc/services (":http").
	if _, err := net.LookupPort("tcp", port); port == "" || err != nil {
		d.fail(key, "port must be between 0 and 65535 or a service name")
	}
}

// validListenHost reports whether host can name a listen address: empty
// (every address), an IP address (with a zone), or a host name of labels
// of letters, digits, '-' and '_' (compose service names have them), none
// empty or longer than 63, none beginning or ending with '-'. Whether a
// name resolves is the environment's, checked at start.
func validListenHost(host string) bool {
	if host == "" {
		return true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	name := strings.TrimSuffix(host, ".")
	if name == "" || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}

// listenersClash reports whether listeners on a and b can never both
// bind: one port (not 0, which picks a free one), and hosts that overlap.
// An empty host, "::" and "0.0.0.0" are every address of both families
// (Go listens dual-stack on each); localhost is taken as 127.0.0.1, which
// Go listens on for it.
func listenersClash(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return false
	}
	portA, errA := net.LookupPort("tcp", pa)
	portB, errB := net.LookupPort("tcp", pb)
	if errA != nil || errB != nil || portA != portB || portA == 0 {
		return false
	}
	addr := func(h string) (netip.Addr, bool) {
		if strings.EqualFold(h, "localhost") {
			h = "127.0.0.1"
		}
		ip, err := netip.ParseAddr(h)
		return ip.Unmap(), err == nil
	}
	ipA, okA := addr(ha)
	ipB, okB := addr(hb)
	every := func(h string, ip netip.Addr, ok bool) bool {
		return h == "" || ok && ip.IsUnspecified()
	}
	if every(ha, ipA, okA) || every(hb, ipB, okB) {
		return true
	}
	if okA && okB {
		return ipA == ipB
	}
	return strings.EqualFold(ha, hb)
}

func (d *decoder) tokens(tokens []TokenConfig) {
	if len(tokens) == 0 {
		d.fail("admin.tokens", "at least one token is required (the admin API is never open)")
		return
	}
	first := map[string]int{}
	for i, t := range tokens {
		if t.Tenant != "" && !IDPattern.MatchString(t.Tenant) {
			d.fail(fmt.Sprintf("admin.tokens[%d].tenant", i), TenantRule)
		}
		key := fmt.Sprintf("admin.tokens[%d].token", i)
		if t.Token == "" {
			d.required(key, "token")
			continue
		}
		if strings.TrimSpace(t.Token) != t.Token {
			// HTTP trims header values: such a token could never match.
			d.fail(key, "starts or ends with whitespace (a newline from a file or a secret store?), so no request could present it")
			continue
		}
		if strings.ContainsFunc(t.Token, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			// No header value holds a control character (a line break
			// inside a two-line secret): no request could present it.
			d.fail(key, "holds a control character (a line break inside a multi-line secret?), so no request could present it")
			continue
		}
		if j, dup := first[t.Token]; dup {
			d.fail(key, "duplicate token: same as admin.tokens[%d].token", j)
			continue
		}
		first[t.Token] = i
	}
}

// weakToken refuses the root config's fallback token, or a short one, on
// an admin listener reachable from other hosts (as the gateway does at
// start).
func (d *decoder) weakToken(a AdminConfig) {
	if i, why := ExposedWeakToken(a); i >= 0 {
		d.fail(fmt.Sprintf("admin.tokens[%d].token", i), "%s", why)
	}
}

func (d *decoder) storage(s StorageConfig) {
	switch s.Driver {
	case "badger":
		if s.Path == "" {
			d.required("storage.path", "path")
		}
	case "postgres":
		d.postgres(s.Postgres)
	case "":
		d.required("storage.driver", "driver")
	default:
		d.fail("storage.driver", "unknown driver %q; want badger or postgres", s.Driver)
	}
}

// postgres validates the database of driver postgres. No message quotes
// the DSN: it holds a password.
func (d *decoder) postgres(p PostgresConfig) {
	if p.DSN == "" {
		d.required("storage.postgres.dsn", "dsn (a postgres:// URL, usually ${HOOKGATE_POSTGRES_DSN})")
	} else if _, err := pgconn.ParseConfig(p.DSN); err != nil {
		d.fail("storage.postgres.dsn", "is not a PostgreSQL connection string (postgres://user:password@host:5432/db?sslmode=…)")
	}
	if p.MaxConns < 1 || p.MaxConns > MaxPostgresMaxConns {
		d.fail("storage.postgres.max_conns", "must be between 1 and %d", MaxPostgresMaxConns)
	}
}

// retry validates a retry policy; check says which fields to look at, so an
// endpoint override is only blamed for the fields it sets.
func (d *decoder) retry(r RetryConfig, prefix string, check func(field string) bool) {
	if check("initial_interval") {
		d.positive(prefix+"initial_interval", r.InitialInterval)
	}
	if check("multiplier") && r.Multiplier < 1 {
		d.fail(prefix+"multiplier", "must be at least 1")
	}
	if check("max_interval") {
		d.positive(prefix+"max_interval", r.MaxInterval)
	}
	if check("randomization") && (r.Randomization < 0 || r.Randomization > 1) {
		d.fail(prefix+"randomization", "must be between 0 and 1")
	}
	if check("max_attempts") && r.MaxAttempts < 1 {
		d.fail(prefix+"max_attempts", "must be at least 1")
	}
	if check("max_elapsed") {
		d.positive(prefix+"max_elapsed", r.MaxElapsed)
	}
	if (check("initial_interval") || check("max_interval")) && r.InitialInterval > r.MaxInterval && r.MaxInterval > 0 {
		d.fail(prefix+"initial_interval", "must not exceed max_interval (%s)", r.MaxInterval)
	}
}

// idPattern is the syntax of source and endpoint IDs: a URL path segment.
var IDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// id checks an ID's syntax and uniqueness; first maps IDs to their index.
func (d *decoder) id(key, id, list string, first map[string]int) bool {
	switch {
	case id == "":
		d.required(key, "id")
		return false
	case !IDPattern.MatchString(id):
		d.fail(key, "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
		return false
	}
	if j, dup := first[id]; dup {
		d.fail(key, "duplicate id %q: same as %s[%d]", id, list, j)
		return false
	}
	return true
}

// tenantRule is what a tenant may be: an id's characters. The store
// separates the parts of its keys with a NUL byte, so a tenant must never
// hold one (nor anything else an id may not).
const TenantRule = "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"

func (d *decoder) tenant(key, tenant string) {
	switch {
	case tenant == "":
		d.fail(key, "must not be empty; leave it out for %q", DefaultTenant)
	case !IDPattern.MatchString(tenant):
		d.fail(key, TenantRule)
	}
}

// sources validates every source and returns the valid IDs' sources.
func (d *decoder) sources(sources []SourceConfig) map[string]*SourceConfig {
	byID := map[string]*SourceConfig{}
	first := map[string]int{}
	for i := range sources {
		s := &sources[i]
		key := fmt.Sprintf("sources[%d]", i)
		if d.id(key+".id", s.ID, "sources", first) {
			first[s.ID], byID[s.ID] = i, s
		}
		if s.ID == storage.NoticeSource {
			d.fail(key+".id", "%q is the source of hookgate's own operational events: choose another", s.ID)
		}
		d.tenant(key+".tenant", s.Tenant)
		d.verify(s.Verify, key+".verify")
		d.expr(key+".event_id", s.EventID)
		d.expr(key+".event_type", s.EventType)
	}
	return byID
}

func (d *decoder) expr(key, s string) {
	if s == "" {
		return
	}
	if _, err := inbound.ParseExpr(s); err != nil {
		d.fail(key, "%v", err)
	}
}

// schemes are the accepted verify schemes, in the order SPEC lists them.
var schemes = []string{
	inbound.SchemeStripe, inbound.SchemeGitHub, inbound.SchemeShopify, inbound.SchemeSlack,
	inbound.SchemeStandardWebhooks, inbound.SchemeHMAC, inbound.SchemeNone,
}

// timestampSchemes sign a timestamp, which tolerance bounds.
var TimestampSchemes = []string{inbound.SchemeStripe, inbound.SchemeSlack, inbound.SchemeStandardWebhooks}

func (d *decoder) verify(v *VerifyConfig, key string) {
	if v == nil {
		d.fail(key, "a source must say how it is verified; write scheme: none to accept unsigned requests")
		return
	}
	d.positive(key+".tolerance", v.Tolerance)
	switch {
	case v.Scheme == "":
		d.required(key+".scheme", "scheme (one of "+strings.Join(schemes, ", ")+")")
	case !slices.Contains(schemes, v.Scheme):
		d.fail(key+".scheme", "unknown scheme %q; want one of %s", v.Scheme, strings.Join(schemes, ", "))
	default: // the other checks depend on a known scheme
		before := len(d.errs)
		d.secrets(v, key)
		d.hmac(v, key)
		if d.set[key+".tolerance"] && !slices.Contains(TimestampSchemes, v.Scheme) {
			d.fail(key+".tolerance", "scheme %s signs no timestamp, so a tolerance would be ignored; remove it", v.Scheme)
		}
		if len(d.errs) == before {
			d.verifier(v, key)
		}
	}
}

// verifier builds the inbound verifier from v, so that a config check-config
// accepts is one serve can start with. It only finds something if the checks
// above and inbound's disagree; its problems never contain a secret.
func (d *decoder) verifier(v *VerifyConfig, key string) {
	_, err := inbound.NewVerifier(inbound.VerifyConfig{
		Scheme: v.Scheme, Secrets: v.Secrets, Tolerance: v.Tolerance.D(),
		Header: v.Header, Algorithm: v.Algorithm, Encoding: v.Encoding, Prefix: v.Prefix,
	})
	if err == nil {
		return
	}
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	for _, e := range errs {
		if ce, ok := errors.AsType[*inbound.ConfigError](e); ok {
			d.fail(key+"."+ce.Field, "%s", ce.Problem)
		} else {
			d.fail(key, "%v", e)
		}
	}
}

func (d *decoder) secrets(v *VerifyConfig, key string) {
	key += ".secrets"
	switch {
	case v.Scheme == "none" && len(v.Secrets) > 0:
		d.fail(key, "scheme none verifies nothing, so it takes no secrets; remove them or pick a scheme")
	case v.Scheme == "none":
	case len(v.Secrets) == 0:
		d.fail(key, "at least one secret is required for scheme %s", v.Scheme)
	}
	for _, p := range inbound.SecretProblems(v.Scheme, v.Secrets) {
		d.fail(strings.TrimSuffix(key, ".secrets")+"."+p.Field, "%s", p.Problem)
	}
	for j, s := range v.Secrets {
		k := fmt.Sprintf("%s[%d]", key, j)
		switch {
		case s == "":
			d.required(k, "secret")
		case v.Scheme == "standard-webhooks" && !ValidWhsec(s, 1):
			d.fail(k, "must be whsec_ followed by base64, as the sender shows it")
		}
	}
}

// hmac applies the hmac-only defaults and checks, and rejects hmac-only
// keys on other schemes, where they would be silently ignored.
func (d *decoder) hmac(v *VerifyConfig, key string) {
	if v.Scheme != "hmac" {
		for _, f := range []string{"header", "algorithm", "encoding", "prefix"} {
			if d.set[key+"."+f] {
				d.fail(key+"."+f, "only applies to scheme hmac")
			}
		}
		return
	}
	v.Algorithm = cmp.Or(v.Algorithm, DefaultHMACAlgorithm)
	v.Encoding = cmp.Or(v.Encoding, DefaultHMACEncoding)
	switch {
	case v.Header == "":
		d.required(key+".header", "header (scheme hmac)")
	case !ValidHeaderName(v.Header):
		d.fail(key+".header", "is not a valid header name")
	}
	if !slices.Contains([]string{"sha1", "sha256", "sha512"}, v.Algorithm) {
		d.fail(key+".algorithm", "unknown algorithm %q; want sha1, sha256 or sha512", v.Algorithm)
	}
	if v.Encoding != "hex" && v.Encoding != "base64" {
		d.fail(key+".encoding", "unknown encoding %q; want hex or base64", v.Encoding)
	}
}

// validWhsec reports whether s is "whsec_" + standard base64 of at least
// minLen bytes, the Standard Webhooks secret format.
func ValidWhsec(s string, minLen int) bool {
	b64, ok := strings.CutPrefix(s, "whsec_")
	if !ok {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	return err == nil && len(raw) >= minLen
}

// minEndpointSecret is the Standard Webhooks minimum secret length in bytes.
const MinEndpointSecret = 24

// maxEndpointsPerTenant bounds a tenant's endpoints (config.yaml and the
// admin API): an event is stored with a delivery to each subscriber in
// one write, and a write past ~10,000 deliveries does not fit in one
// Badger transaction (the event could never be accepted). A variable for
// tests.
var MaxEndpointsPerTenant = 5000

func (d *decoder) endpoints(endpoints []EndpointConfig, sources map[string]*SourceConfig) {
	first := map[string]int{}
	perTenant := map[string]int{}
	for i := range endpoints {
		e := &endpoints[i]
		key := fmt.Sprintf("endpoints[%d]", i)
		if d.id(key+".id", e.ID, "endpoints", first) {
			first[e.ID] = i
		}
		if e.ID == AlertsEndpointID {
			d.fail(key+".id", "%q is the id of the alerts.url endpoint: choose another", AlertsEndpointID)
		}
		d.tenant(key+".tenant", e.Tenant)
		if perTenant[e.Tenant]++; perTenant[e.Tenant] == MaxEndpointsPerTenant+1 {
			d.fail(key, "tenant %q has more than %d endpoints, the most a tenant may have", e.Tenant, MaxEndpointsPerTenant)
		}
		d.url(key+".url", e.URL)
		if e.Secret != "" && !ValidWhsec(e.Secret, MinEndpointSecret) {
			d.fail(key+".secret", "must be whsec_ followed by base64 of at least %d bytes; leave it out to have one generated", MinEndpointSecret)
		}
		d.endpointSources(e, key, sources)
		d.eventTypes(e.EventTypes, key+".event_types")
		d.headers(e.Headers, key+".headers")
		d.endpointLimits(e, key)
	}
}

func (d *decoder) url(key, raw string) {
	if raw == "" {
		d.required(key, "url")
		return
	}
	if p := URLProblem(raw); p != "" {
		d.fail(key, "%s", p)
	}
}

func (d *decoder) endpointSources(e *EndpointConfig, key string, sources map[string]*SourceConfig) {
	for j, id := range e.Sources {
		k := fmt.Sprintf("%s.sources[%d]", key, j)
		s := sources[id]
		switch {
		case s == nil:
			d.fail(k, "unknown source %q", id)
		case s.Tenant != e.Tenant:
			d.fail(k, "source %q belongs to tenant %q, not %q", id, s.Tenant, e.Tenant)
		}
	}
}

func (d *decoder) eventTypes(globs []string, key string) {
	if i, p := EventTypesProblem(globs); p != "" {
		d.fail(IndexedField(key, i), "%s", p)
		return
	}
	for j, g := range globs {
		k := fmt.Sprintf("%s[%d]", key, j)
		if g == "" {
			d.required(k, "event type glob")
		} else if err := storage.ValidTypeGlob(g); err != nil {
			d.fail(k, "invalid glob %q: %v", g, err)
		}
	}
}

// reservedHeaders are set by hookgate on every delivery (SPEC section 4) or
// frame the HTTP request; an endpoint's static headers must not replace them.
var ReservedHeaders = []string{
	"content-type", "content-length", "host", "user-agent", "idempotency-key",
	"connection", "transfer-encoding", "te", "trailer", "upgrade", "keep-alive", "proxy-connection",
}

// reservedHeaderPrefixes are the Standard Webhooks and hookgate header families.
var ReservedHeaderPrefixes = []string{"webhook-", "hookgate-"}

func (d *decoder) headers(h map[string]string, key string) {
	if p := HeadersProblem(h); p != "" {
		d.fail(key, "%s", p)
		return
	}
	names := slices.Sorted(maps.Keys(h))
	seen := map[string]string{}
	for _, name := range names {
		k := joinKey(key, name)
		lower := strings.ToLower(name)
		switch {
		case !ValidHeaderName(name):
			d.fail(k, "is not a valid header name")
		case slices.Contains(ReservedHeaders, lower) || HasAnyPrefix(lower, ReservedHeaderPrefixes):
			d.fail(k, "is set by hookgate and cannot be overridden")
		case seen[lower] != "":
			d.fail(k, "duplicate header: same as %s (header names are case-insensitive)", seen[lower])
		case !ValidHeaderValue(h[name]):
			d.fail(k, "value contains characters not allowed in a header (control characters or line breaks)")
		}
		seen[lower] = cmp.Or(seen[lower], name)
	}
}

func HasAnyPrefix(s string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(s, p) })
}

// validHeaderName reports whether s is an RFC 9110 token.
func ValidHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !alnum && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// validHeaderValue rejects control characters other than tab: a line break
// in a header value would let config smuggle headers.
func ValidHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func (d *decoder) endpointLimits(e *EndpointConfig, key string) {
	if d.set[key+".timeout"] {
		d.timeout(key+".timeout", e.Timeout)
	}
	if e.MaxInFlight < 1 || e.MaxInFlight > outbound.MaxMaxInFlight {
		d.fail(key+".max_in_flight", "must be from 1 to %d", outbound.MaxMaxInFlight)
	}
	if e.RateLimit < 0 {
		d.fail(key+".rate_limit", "must be 0 (unlimited) or more")
	}
	prefix := key + ".retry."
	d.retry(*e.Retry, prefix, func(field string) bool { return d.set[prefix+field] })
}
