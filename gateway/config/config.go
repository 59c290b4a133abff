// Package config is config.yaml: its types and defaults, the strict YAML
// decoder (every error with its line, the entry's id and the key's path),
// ${VAR} expansion, sizes and durations, and the validation rules the
// admin API applies too (rules.go). It imports nothing of the gateway.
package config

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"hookgate/inbound"
	"hookgate/storage"
)

// Config is config.yaml (SPEC section 2) after environment expansion,
// defaults and validation. A *Config returned by Load or Parse is
// complete: every default is filled in and every endpoint's Timeout and Retry
// are resolved, so consumers never fall back to anything themselves.
type Config struct {
	// Server is the public ingest listener.
	Server ServerConfig `yaml:"server"`
	// Admin is the admin API listener and its bearer tokens.
	Admin AdminConfig `yaml:"admin"`
	// Storage selects and locates the store.
	Storage StorageConfig `yaml:"storage"`
	// Dedupe controls how long inbound event IDs are remembered.
	Dedupe DedupeConfig `yaml:"dedupe"`
	// Retention is how long events, deliveries and attempts are kept.
	Retention Duration `yaml:"retention"`
	// Delivery holds the outbound defaults every endpoint inherits.
	Delivery DeliveryConfig `yaml:"delivery"`
	// Sources are the providers that post to /ingest/{id}.
	Sources []SourceConfig `yaml:"sources"`
	// Endpoints are the receivers events are delivered to.
	Endpoints []EndpointConfig `yaml:"endpoints"`
	// Alerts is the operator's receiver of every tenant's operational
	// events (docs/delivery.md, "Operational events").
	Alerts AlertsConfig `yaml:"alerts"`
}

// AlertsConfig is the operator's alert endpoint: with a URL, the gateway
// keeps an endpoint AlertsEndpointID, of no tenant, subscribed to every
// tenant's operational events (hookgate.*), delivered, signed and retried
// like any delivery.
type AlertsConfig struct {
	// URL receives the events; "" means no alert endpoint.
	URL string `yaml:"url"`
	// Secret is its Standard Webhooks signing secret; "" means one is
	// generated (an operator token reads it at GET
	// /api/v1/endpoints/hookgate-alerts).
	Secret string `yaml:"secret"`
}

// AlertsEndpointID is the id of the endpoint alerts.url configures. No
// other endpoint may have it.
const AlertsEndpointID = "hookgate-alerts"

// AlertsEndpoint is the endpoint alerts.url configures, with the delivery
// defaults; ok is false without alerts.url. Its tenant is "", the
// operator's: only operator tokens see it.
func (c *Config) AlertsEndpoint() (ec EndpointConfig, ok bool) {
	if c.Alerts.URL == "" {
		return ec, false
	}
	retry := c.Delivery.Retry
	return EndpointConfig{
		ID: AlertsEndpointID, URL: c.Alerts.URL, Secret: c.Alerts.Secret, EventTypes: []string{"hookgate.*"},
		Timeout: c.Delivery.Timeout, MaxInFlight: DefaultMaxInFlight, RateLimit: DefaultRateLimit, Retry: &retry,
	}, true
}

// AllEndpoints is config.yaml's endpoints and, last, the alerts.url one.
func (c *Config) AllEndpoints() []EndpointConfig {
	if ec, ok := c.AlertsEndpoint(); ok {
		return append(slices.Clip(c.Endpoints), ec)
	}
	return c.Endpoints
}

// ServerConfig is the public ingest listener.
type ServerConfig struct {
	// Listen is the host:port to listen on (default DefaultServerListen).
	Listen string `yaml:"listen"`
	// MaxBody is the largest accepted request body; larger bodies get 413
	// (default DefaultMaxBody, at most storage.MaxEventBody: 32MiB).
	MaxBody Size `yaml:"max_body"`
}

// AdminConfig is the admin listener (API, metrics, health). It is separate
// from the public listener so it can stay on a private interface.
type AdminConfig struct {
	// Listen is the host:port to listen on (default DefaultAdminListen).
	Listen string `yaml:"listen"`
	// Tokens are the accepted bearer tokens; at least one is required so the
	// admin API is never open.
	Tokens []TokenConfig `yaml:"tokens"`
}

// TokenConfig is one admin bearer token and its scope.
type TokenConfig struct {
	// Token is the bearer secret, usually ${VAR} from the environment.
	Token string `yaml:"token"`
	// Tenant scopes the token to one tenant; "" is the operator (all tenants).
	Tenant string `yaml:"tenant"`
}

// StorageConfig selects the store engine and where it keeps its data.
type StorageConfig struct {
	// Driver is the engine: "badger" (embedded, one gateway) or
	// "postgres" (any number of gateways on one database).
	Driver string `yaml:"driver"`
	// Path is the Badger directory (default DefaultStoragePath); badger only.
	Path string `yaml:"path"`
	// Postgres is the database of driver postgres.
	Postgres PostgresConfig `yaml:"postgres"`
}

// PostgresConfig is the database several gateways share.
type PostgresConfig struct {
	// DSN is the connection string (postgres://user:pass@host:5432/db?…),
	// usually ${HOOKGATE_POSTGRES_DSN}. It is a secret: never logged or
	// echoed in an error.
	DSN string `yaml:"dsn"`
	// MaxConns bounds this gateway's connections (default
	// DefaultPostgresMaxConns, at most MaxPostgresMaxConns).
	MaxConns int `yaml:"max_conns"`
}

// DedupeConfig controls inbound deduplication.
type DedupeConfig struct {
	// TTL is how long an inbound event ID (and an admin Idempotency-Key) is
	// remembered (default DefaultDedupeTTL).
	TTL Duration `yaml:"ttl"`
}

// DeliveryConfig holds the outbound settings endpoints inherit.
type DeliveryConfig struct {
	// Timeout bounds one attempt (default DefaultDeliveryTimeout, at most 1h).
	Timeout Duration `yaml:"timeout"`
	// AllowPrivateTargets lets endpoints resolve to loopback, private,
	// link-local or unspecified addresses; off by default against SSRF.
	AllowPrivateTargets bool `yaml:"allow_private_targets"`
	// Retry is the default backoff policy of every endpoint.
	Retry RetryConfig `yaml:"retry"`
}

// RetryConfig is an exponential backoff policy with jitter, with the meaning
// of cenkalti/backoff's ExponentialBackOff.
type RetryConfig struct {
	// InitialInterval is the wait after the first failed attempt.
	InitialInterval Duration `yaml:"initial_interval"`
	// Multiplier grows the interval after each failure; at least 1.
	Multiplier float64 `yaml:"multiplier"`
	// MaxInterval caps one wait's interval, including an honoured
	// Retry-After, before jitter: a wait may reach MaxInterval × (1 +
	// Randomization).
	MaxInterval Duration `yaml:"max_interval"`
	// Randomization is the jitter factor in [0, 1]: a wait is drawn from
	// interval × [1-r, 1+r].
	Randomization float64 `yaml:"randomization"`
	// MaxAttempts is the number of attempts before the delivery fails.
	MaxAttempts int `yaml:"max_attempts"`
	// MaxElapsed is the time since the delivery was created (or retried
	// by hand) after which it fails: a delivery held back longer by
	// rate_limit, max_in_flight or an open circuit fails after its next
	// attempt.
	MaxElapsed Duration `yaml:"max_elapsed"`
}

// Policy is the retry policy r configures.
func (r RetryConfig) Policy() storage.RetryPolicy {
	return storage.RetryPolicy{
		InitialInterval: r.InitialInterval.D(), Multiplier: r.Multiplier, MaxInterval: r.MaxInterval.D(),
		Randomization: r.Randomization, MaxAttempts: r.MaxAttempts, MaxElapsed: r.MaxElapsed.D(),
	}
}

// SourceConfig is one webhook provider, posting to /ingest/{ID}.
type SourceConfig struct {
	// ID names the source and is its ingest URL path segment; unique across
	// all tenants.
	ID string `yaml:"id"`
	// Tenant owns the source's events (default DefaultTenant).
	Tenant string `yaml:"tenant"`
	// Verify says how requests are authenticated. Never nil after loading: a
	// source without it is a config error, so the gateway fails closed.
	Verify *VerifyConfig `yaml:"verify"`
	// EventID is the event-ID expression (inbound.ParseExpr); "" means the
	// scheme's default.
	EventID string `yaml:"event_id"`
	// EventType is the event-type expression; "" means the scheme's default.
	EventType string `yaml:"event_type"`
}

// VerifyConfig is how a source's requests are authenticated.
type VerifyConfig struct {
	// Scheme is stripe, github, shopify, slack, standard-webhooks, hmac or none.
	Scheme string `yaml:"scheme"`
	// Secrets are the signing secrets; several allow rotation (any may match).
	Secrets []string `yaml:"secrets"`
	// Tolerance is the accepted clock skew for schemes with a signed
	// timestamp (default DefaultVerifyTolerance).
	Tolerance Duration `yaml:"tolerance"`
	// Header carries the signature (scheme hmac only).
	Header string `yaml:"header"`
	// Algorithm is sha1, sha256 or sha512 (scheme hmac only; default
	// DefaultHMACAlgorithm).
	Algorithm string `yaml:"algorithm"`
	// Encoding of the signature, hex or base64 (scheme hmac only; default
	// DefaultHMACEncoding).
	Encoding string `yaml:"encoding"`
	// Prefix precedes the encoded signature in Header, e.g. "sha256="
	// (scheme hmac only).
	Prefix string `yaml:"prefix"`
}

// EndpointConfig is one receiver of deliveries.
type EndpointConfig struct {
	// ID names the endpoint; unique across all endpoints.
	ID string `yaml:"id"`
	// Tenant owns the endpoint; it only receives its tenant's events
	// (default DefaultTenant).
	Tenant string `yaml:"tenant"`
	// URL is the absolute http(s) URL deliveries are POSTed to (no user
	// info; a port, if any, in 1-65535).
	URL string `yaml:"url"`
	// Secret is the Standard Webhooks signing secret (whsec_…); "" means
	// one is generated.
	Secret string `yaml:"secret"`
	// Sources restricts the endpoint to these source IDs of its tenant;
	// empty means all of them.
	Sources []string `yaml:"sources"`
	// EventTypes restricts the endpoint to types matching one of these
	// globs (storage.MatchType: "*" matches "/" too); empty means all.
	EventTypes []string `yaml:"event_types"`
	// Headers are static headers added to every delivery.
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds one attempt (at most 1h); after loading it is never 0 (it inherits
	// delivery.timeout).
	Timeout Duration `yaml:"timeout"`
	// MaxInFlight caps concurrent attempts to this endpoint (default
	// DefaultMaxInFlight).
	MaxInFlight int `yaml:"max_in_flight"`
	// RateLimit caps attempts per second; 0 is unlimited (default).
	RateLimit float64 `yaml:"rate_limit"`
	// Retry is the backoff policy; after loading it is never nil: fields
	// the file leaves out are inherited from delivery.retry.
	Retry *RetryConfig `yaml:"retry"`
}

// Defaults applied to keys config.yaml leaves out (SPEC section 2).
const (
	// DefaultServerListen is the public ingest listener.
	DefaultServerListen = ":8080"
	// DefaultMaxBody is the largest accepted ingest body.
	DefaultMaxBody Size = 1 << 20
	// DefaultAdminListen keeps the admin API on loopback unless told otherwise.
	DefaultAdminListen = "127.0.0.1:8081"
	// DefaultStorageDriver is the embedded store.
	DefaultStorageDriver = "badger"
	// DefaultStoragePath is the Badger directory, relative to the working directory.
	DefaultStoragePath = "./data"
	// DefaultPostgresMaxConns is the connection pool size per gateway.
	DefaultPostgresMaxConns = 20
	// MaxPostgresMaxConns bounds storage.postgres.max_conns: PostgreSQL's
	// own default max_connections is 100 for every gateway together.
	MaxPostgresMaxConns = 1000
	// DefaultDedupeTTL is how long inbound event IDs are remembered.
	DefaultDedupeTTL = Duration(72 * time.Hour)
	// DefaultRetention is how long events and deliveries are kept (30 days).
	DefaultRetention = Duration(720 * time.Hour)
	// DefaultDeliveryTimeout bounds one delivery attempt.
	DefaultDeliveryTimeout = Duration(15 * time.Second)
	// DefaultRetryInitialInterval is the first backoff wait.
	DefaultRetryInitialInterval = Duration(5 * time.Second)
	// DefaultRetryMultiplier doubles the wait after each failure.
	DefaultRetryMultiplier = 2.0
	// DefaultRetryMaxInterval caps one backoff wait.
	DefaultRetryMaxInterval = Duration(time.Hour)
	// DefaultRetryRandomization is the jitter factor.
	DefaultRetryRandomization = 0.2
	// DefaultRetryMaxAttempts is the number of attempts before a delivery fails.
	DefaultRetryMaxAttempts = 30
	// DefaultRetryMaxElapsed is how long a delivery is retried before it fails.
	DefaultRetryMaxElapsed = Duration(24 * time.Hour)
	// DefaultTenant owns sources and endpoints that name no tenant.
	DefaultTenant = "default"
	// DefaultVerifyTolerance is the accepted skew of signed timestamps.
	DefaultVerifyTolerance = Duration(inbound.DefaultTolerance)
	// DefaultHMACAlgorithm is the hash of scheme hmac.
	DefaultHMACAlgorithm = inbound.DefaultAlgorithm
	// DefaultHMACEncoding is the signature encoding of scheme hmac.
	DefaultHMACEncoding = inbound.DefaultEncoding
	// DefaultMaxInFlight caps concurrent attempts per endpoint.
	DefaultMaxInFlight = 10
	// DefaultRateLimit is attempts per second per endpoint; 0 is unlimited.
	DefaultRateLimit = 0.0
)

// defaulter is implemented by the config structs that have defaults; the
// decoder calls it before decoding into a fresh value, so a key that is
// present always wins and a key that is absent keeps its default. This is
// what lets "max_in_flight: 0" be an error while an absent one means 10.
type defaulter interface{ setDefaults() }

func (c *Config) setDefaults() {
	c.Server = ServerConfig{Listen: DefaultServerListen, MaxBody: DefaultMaxBody}
	c.Admin.Listen = DefaultAdminListen
	c.Storage = StorageConfig{Driver: DefaultStorageDriver, Path: DefaultStoragePath,
		Postgres: PostgresConfig{MaxConns: DefaultPostgresMaxConns}}
	c.Dedupe.TTL = DefaultDedupeTTL
	c.Retention = DefaultRetention
	c.Delivery.Timeout = DefaultDeliveryTimeout
	c.Delivery.Retry = DefaultRetry()
}

func (s *SourceConfig) setDefaults() { s.Tenant = DefaultTenant }
func (v *VerifyConfig) setDefaults() { v.Tolerance = DefaultVerifyTolerance }
func (e *EndpointConfig) setDefaults() {
	e.Tenant, e.MaxInFlight, e.RateLimit = DefaultTenant, DefaultMaxInFlight, DefaultRateLimit
}

// DefaultRetry returns the retry policy used when delivery.retry says nothing.
func DefaultRetry() RetryConfig {
	return RetryConfig{
		InitialInterval: DefaultRetryInitialInterval,
		Multiplier:      DefaultRetryMultiplier,
		MaxInterval:     DefaultRetryMaxInterval,
		Randomization:   DefaultRetryRandomization,
		MaxAttempts:     DefaultRetryMaxAttempts,
		MaxElapsed:      DefaultRetryMaxElapsed,
	}
}

// Duration is a time.Duration written as a Go duration string ("72h",
// "500ms") in config.yaml; a bare number is rejected because its unit would
// be a guess.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText implements encoding.TextMarshaler, so durations render as "15s" in JSON.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with time.ParseDuration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q: want a Go duration such as \"30s\", \"15m\" or \"72h\"", b)
	}
	*d = Duration(v)
	return nil
}

// Error is one problem in a config file, located by line and key.
type Error struct {
	// File is the name given to Parse (the path, for Load).
	File string
	// Line is the 1-based line of the offending key; 0 when unknown.
	Line int
	// Key is the dotted path of the key, e.g. "sources[1].verify.scheme";
	// "" for problems with the document as a whole.
	Key string
	// ID is the id of the list entry (a source or an endpoint) that Key
	// is in, when the entry has a valid one: the error names it beside
	// the entry's index.
	ID string
	// Msg says what is wrong. It never contains the value of a secret.
	Msg string
}

// Error formats e as "<file>:<line>: <key>: <msg>", the form editors and CI
// annotate; the line and key parts are left out when unknown. The entry's
// id follows its index: "sources[1] (id naked-src).verify".
func (e Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if key := e.Key; key != "" {
		if i := strings.IndexByte(key, ']'); i > 0 && e.ID != "" {
			key = key[:i+1] + " (id " + e.ID + ")" + key[i+1:]
		}
		b.WriteString(key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a config file, in line order.
// Parse returns it as its error so that check-config can print them
// all at once instead of making the operator fix them one run at a time.
type Errors []Error

// Error prints one error per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Load reads, expands (from the process environment), decodes and
// validates the config file at path. A validation failure is a Errors.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	defer f.Close()
	// Bounded: /dev/zero, or a log file named by mistake, must not take
	// the machine's memory (a 200 MB file took 1.4 GB and 10 s).
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("load config: %s is larger than %v: not a config file", path, Size(MaxFileSize))
	}
	return Parse(data, path, os.LookupEnv)
}

// maxConfigFile bounds config.yaml (thousands of endpoints fit in 1 MiB).
const MaxFileSize = 16 << 20

// Parse decodes and validates one YAML document. name labels errors
// (usually the file path). lookupEnv resolves ${VAR} references; nil means
// no variable is set. It returns either a complete *Config or a non-nil
// error, which is always a Errors.
func Parse(data []byte, name string, lookupEnv func(string) (string, bool)) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = noEnv
	}
	d := &decoder{
		file: name, env: lookupEnv,
		lines: map[string]int{}, set: map[string]bool{}, bad: map[string]bool{}, unset: map[string][]string{},
	}
	cfg := &Config{}
	cfg.setDefaults()
	root, ok := d.document(data)
	if !ok {
		return nil, d.errs
	}
	if root != nil {
		d.value(root, reflect.ValueOf(cfg).Elem(), "", d.lines[""])
	}
	if d.aliasVisits <= maxAliasVisits { // else the values are incomplete: do not pile on
		d.resolve(cfg)
		d.validate(cfg)
	}
	if len(d.errs) > 0 {
		d.nameEntries(cfg)
		slices.SortStableFunc(d.errs, func(a, b Error) int { return cmp.Compare(a.Line, b.Line) })
		return nil, d.errs
	}
	return cfg, nil
}

// Check is the check-config command: it loads the file at path and
// writes either "config OK: …" to stdout or every error, one per line, to
// stderr (where serve writes them too). It returns the process exit code:
// 0 when the config is valid, 1 otherwise.
func Check(path string, stdout, stderr io.Writer) int {
	cfg, err := Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "config OK: %d sources, %d endpoints\n", len(cfg.Sources), len(cfg.Endpoints))
	return 0
}

const (
	// maxAliasVisits bounds the values decoded through aliases: they can
	// make a small file describe a huge tree. Everything else is bounded
	// by the size of the file.
	maxAliasVisits = 100_000
	// maxErrors bounds the error list; nobody reads past it.
	maxErrors = 1000
)
