package gateway

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"

	"hookgate/inbound"
)

// Config is config.yaml (SPEC section 2) after environment expansion,
// defaults and validation. A *Config returned by LoadConfig or ParseConfig is
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
}

// ServerConfig is the public ingest listener.
type ServerConfig struct {
	// Listen is the host:port to listen on (default DefaultServerListen).
	Listen string `yaml:"listen"`
	// MaxBody is the largest accepted request body; larger bodies get 413
	// (default DefaultMaxBody).
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

// StorageConfig selects the store engine and where it keeps its files.
type StorageConfig struct {
	// Driver is the engine; only "badger" exists today.
	Driver string `yaml:"driver"`
	// Path is the Badger directory (default DefaultStoragePath).
	Path string `yaml:"path"`
}

// DedupeConfig controls inbound deduplication.
type DedupeConfig struct {
	// TTL is how long an inbound event ID (and an admin Idempotency-Key) is
	// remembered (default DefaultDedupeTTL).
	TTL Duration `yaml:"ttl"`
}

// DeliveryConfig holds the outbound settings endpoints inherit.
type DeliveryConfig struct {
	// Timeout bounds one attempt (default DefaultDeliveryTimeout).
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
	// MaxInterval caps one wait, including an honoured Retry-After.
	MaxInterval Duration `yaml:"max_interval"`
	// Randomization is the jitter factor in [0, 1]: a wait is drawn from
	// interval × [1-r, 1+r].
	Randomization float64 `yaml:"randomization"`
	// MaxAttempts is the number of attempts before the delivery fails.
	MaxAttempts int `yaml:"max_attempts"`
	// MaxElapsed is the time since the first attempt after which the
	// delivery fails.
	MaxElapsed Duration `yaml:"max_elapsed"`
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
	// URL is the absolute http(s) URL deliveries are POSTed to.
	URL string `yaml:"url"`
	// Secret is the Standard Webhooks signing secret (whsec_…); "" means
	// one is generated.
	Secret string `yaml:"secret"`
	// Sources restricts the endpoint to these source IDs of its tenant;
	// empty means all of them.
	Sources []string `yaml:"sources"`
	// EventTypes restricts the endpoint to types matching one of these
	// path.Match globs; empty means all.
	EventTypes []string `yaml:"event_types"`
	// Headers are static headers added to every delivery.
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds one attempt; after loading it is never 0 (it inherits
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
	c.Storage = StorageConfig{Driver: DefaultStorageDriver, Path: DefaultStoragePath}
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

// ConfigError is one problem in a config file, located by line and key.
type ConfigError struct {
	// File is the name given to ParseConfig (the path, for LoadConfig).
	File string
	// Line is the 1-based line of the offending key; 0 when unknown.
	Line int
	// Key is the dotted path of the key, e.g. "sources[1].verify.scheme";
	// "" for problems with the document as a whole.
	Key string
	// Msg says what is wrong. It never contains the value of a secret.
	Msg string
}

// Error formats e as "<file>:<line>: <key>: <msg>", the form editors and CI
// annotate; the line and key parts are left out when unknown.
func (e ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ConfigErrors is every problem found in a config file, in line order.
// ParseConfig returns it as its error so that check-config can print them
// all at once instead of making the operator fix them one run at a time.
type ConfigErrors []ConfigError

// Error prints one error per line.
func (es ConfigErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// LoadConfig reads, expands (from the process environment), decodes and
// validates the config file at path. A validation failure is a ConfigErrors.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return ParseConfig(data, path, os.LookupEnv)
}

// ParseConfig decodes and validates one YAML document. name labels errors
// (usually the file path). lookupEnv resolves ${VAR} references; nil means
// no variable is set. It returns either a complete *Config or a non-nil
// error, which is always a ConfigErrors.
func ParseConfig(data []byte, name string, lookupEnv func(string) (string, bool)) (*Config, error) {
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
		slices.SortStableFunc(d.errs, func(a, b ConfigError) int { return cmp.Compare(a.Line, b.Line) })
		return nil, d.errs
	}
	return cfg, nil
}

// CheckConfig is the check-config command: it loads the file at path and
// writes either "config OK: …" or every error, one per line, to w. It returns
// the process exit code: 0 when the config is valid, 1 otherwise.
func CheckConfig(path string, w io.Writer) int {
	cfg, err := LoadConfig(path)
	if err != nil {
		fmt.Fprintln(w, err)
		return 1
	}
	fmt.Fprintf(w, "config OK: %d sources, %d endpoints\n", len(cfg.Sources), len(cfg.Endpoints))
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

// decoder walks the yaml.Node tree into a Config, guided by the structs'
// yaml tags, then validates it. It collects errors instead of stopping, and
// remembers the line of every key so validation errors can point at it.
type decoder struct {
	file  string
	env   func(string) (string, bool)
	errs  ConfigErrors
	lines map[string]int      // key -> line where it appears ("" is the root)
	set   map[string]bool     // keys given a non-null value
	bad   map[string]bool     // keys with a decode error: validation skips them
	unset map[string][]string // key -> unset variables its value referenced

	inAlias     int // > 0 while decoding through an alias
	aliasVisits int // values decoded while inAlias > 0
}

var yamlErrLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// document parses data as exactly one YAML document and returns its root
// node, nil for an empty document, and false on a syntax error.
func (d *decoder) document(data []byte) (root *yaml.Node, ok bool) {
	d.lines[""] = 1
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := decodeNode(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, true
		}
		d.syntaxError(err)
		return nil, false
	}
	var extra yaml.Node
	if err := decodeNode(dec, &extra); !errors.Is(err, io.EOF) {
		if err != nil {
			d.syntaxError(err)
		} else {
			d.errorf(extra.Line, "", "only one YAML document is allowed; remove the second one (the --- line)")
		}
		return nil, false
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, true
	}
	root = doc.Content[0]
	if root.Kind != yaml.MappingNode {
		d.errorf(root.Line, "", "the top level must be a mapping of keys such as server, admin, sources; got %s", kindName(root))
		return nil, false
	}
	d.lines[""] = root.Line
	return root, true
}

// decodeNode is dec.Decode with a panic in the third-party parser turned into
// an error: config is outside input and must never crash the process.
func decodeNode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: cannot parse document: %v", r)
		}
	}()
	return dec.Decode(n)
}

func (d *decoder) syntaxError(err error) {
	if m := yamlErrLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		d.errorf(line, "", "invalid YAML: %s", m[2])
		return
	}
	d.errorf(0, "", "invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
}

func (d *decoder) errorf(line int, key, format string, args ...any) {
	switch {
	case len(d.errs) > maxErrors:
		return
	case len(d.errs) == maxErrors:
		d.errs = append(d.errs, ConfigError{File: d.file, Line: line, Msg: "too many errors; stopping here"})
		return
	}
	if key != "" {
		d.bad[key] = true
	}
	d.errs = append(d.errs, ConfigError{File: d.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

var (
	durationType = reflect.TypeFor[Duration]()
	sizeType     = reflect.TypeFor[Size]()
)

// value decodes n into v. line is the line of the key that holds n.
// A null value (~, null or nothing) leaves v as it is, i.e. at its default.
func (d *decoder) value(n *yaml.Node, v reflect.Value, key string, line int) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		d.inAlias++
		defer func() { d.inAlias-- }()
		n = n.Alias
	}
	if d.inAlias > 0 {
		if d.aliasVisits++; d.aliasVisits > maxAliasVisits {
			if d.aliasVisits == maxAliasVisits+1 {
				d.errorf(line, "", "too many alias expansions: write the values out instead")
			}
			return
		}
	}
	if isNull(n) {
		return
	}
	d.set[key] = true
	switch {
	case v.Type() == durationType || v.Type() == sizeType:
		d.scalar(n, v, key, line)
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			v.Set(newDefaulted(v.Type().Elem()))
		}
		d.value(n, v.Elem(), key, line)
	case v.Kind() == reflect.Struct:
		d.structure(n, v, key, line)
	case v.Kind() == reflect.Slice:
		d.sequence(n, v, key, line)
	case v.Kind() == reflect.Map:
		d.stringMap(n, v, key, line)
	default:
		d.scalar(n, v, key, line)
	}
}

// newDefaulted returns a pointer to a new t with its defaults applied.
func newDefaulted(t reflect.Type) reflect.Value {
	p := reflect.New(t)
	if df, ok := p.Interface().(defaulter); ok {
		df.setDefaults()
	}
	return p
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, key string, line int) {
	if !d.kind(n, yaml.MappingNode, key, line) {
		return
	}
	names := yamlNames(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		name, ok := d.mapKey(k, key, seen)
		if !ok {
			continue
		}
		child := joinKey(key, name)
		idx := slices.Index(names, name)
		if idx < 0 {
			d.errorf(k.Line, child, "unknown key%s", suggest(name, names))
			continue
		}
		d.lines[child] = k.Line
		d.value(val, v.Field(idx), child, k.Line)
	}
}

// mapKey checks one mapping key: a scalar, not seen before in this mapping.
func (d *decoder) mapKey(k *yaml.Node, key string, seen map[string]int) (string, bool) {
	if k.Kind != yaml.ScalarNode {
		d.errorf(k.Line, key, "mapping keys must be plain strings")
		return "", false
	}
	if first, dup := seen[k.Value]; dup {
		d.errorf(k.Line, joinKey(key, k.Value), "duplicate key (first at line %d)", first)
		return "", false
	}
	seen[k.Value] = k.Line
	return k.Value, true
}

// yamlNames returns the yaml tag of each field of struct type t, by index.
func yamlNames(t reflect.Type) []string {
	names := make([]string, t.NumField())
	for i := range names {
		names[i] = t.Field(i).Tag.Get("yaml")
	}
	return names
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, key string, line int) {
	if !d.kind(n, yaml.SequenceNode, key, line) {
		return
	}
	s := reflect.MakeSlice(v.Type(), 0, len(n.Content))
	for i, item := range n.Content {
		child := fmt.Sprintf("%s[%d]", key, i)
		d.lines[child] = item.Line
		elem := newDefaulted(v.Type().Elem()).Elem()
		d.value(item, elem, child, item.Line)
		s = reflect.Append(s, elem)
	}
	v.Set(s)
}

func (d *decoder) stringMap(n *yaml.Node, v reflect.Value, key string, line int) {
	if !d.kind(n, yaml.MappingNode, key, line) {
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		name, ok := d.mapKey(k, key, seen)
		if !ok {
			continue
		}
		child := joinKey(key, name)
		d.lines[child] = k.Line
		elem := reflect.New(v.Type().Elem()).Elem()
		d.value(val, elem, child, k.Line)
		m.SetMapIndex(reflect.ValueOf(name), elem)
	}
	v.Set(m)
}

// scalar expands ${VAR} references in n and types the result for v. The
// YAML tag is ignored on purpose: "${PORT:-8080}" is a string to YAML but
// an integer to us, so typing happens after expansion, on the text.
func (d *decoder) scalar(n *yaml.Node, v reflect.Value, key string, line int) {
	if !d.kind(n, yaml.ScalarNode, key, line) {
		return
	}
	exp, err := expandEnv(n.Value, d.env)
	if err != nil {
		d.errorf(line, key, "%v", err)
		return
	}
	if len(exp.unset) > 0 {
		d.unset[key] = exp.unset
	}
	if err := setScalar(v, exp.value); err != nil {
		d.errorf(line, key, "%v", err)
	}
}

// setScalar parses s into v according to v's type. Error texts quote s only
// for numbers, booleans, durations and sizes, which are never secrets.
func setScalar(v reflect.Value, s string) error {
	switch {
	case v.Type() == durationType:
		return v.Addr().Interface().(*Duration).UnmarshalText([]byte(s))
	case v.Type() == sizeType:
		return v.Addr().Interface().(*Size).UnmarshalText([]byte(s))
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, ok := parseBool(s)
		if !ok {
			return fmt.Errorf("invalid boolean %q: want true or false", s)
		}
		v.SetBool(b)
	case reflect.Int:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v.OverflowInt(i) {
			return fmt.Errorf("invalid integer %q", s)
		}
		v.SetInt(i)
	case reflect.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("invalid number %q", s)
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("unsupported config type %s", v.Type()) // a bug in this file
	}
	return nil
}

// parseBool accepts the YAML 1.2 core booleans only; yes/no/on/off are
// errors rather than guesses.
func parseBool(s string) (value, ok bool) {
	switch s {
	case "true", "True", "TRUE":
		return true, true
	case "false", "False", "FALSE":
		return false, true
	}
	return false, false
}

// kind reports whether n has the wanted kind, recording an error if not.
func (d *decoder) kind(n *yaml.Node, want yaml.Kind, key string, line int) bool {
	if n.Kind == want {
		return true
	}
	names := map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list", yaml.ScalarNode: "a single value"}
	d.errorf(line, key, "expected %s, got %s", names[want], kindName(n))
	return false
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a single value"
	}
	return "an unresolved alias"
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// joinKey appends name to the dotted key parent. A name with unprintable
// characters is quoted, so that every error stays on one line.
func joinKey(parent, name string) string {
	if strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) {
		name = strconv.Quote(name)
	}
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// parentKey strips the last ".name" or "[i]" from key; "" is the root.
func parentKey(key string) string {
	if strings.HasSuffix(key, "]") {
		if i := strings.LastIndexByte(key, '['); i >= 0 {
			return key[:i]
		}
	}
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[:i]
	}
	return ""
}

// suggest returns "; did you mean X?" for the known name closest to an
// unknown one (case, "_" and "-" ignored, or at most two edits away), else
// the list of known names.
func suggest(name string, known []string) string {
	norm := func(s string) string { return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s)) }
	best, bestDist := "", 3
	for _, k := range known {
		dist := editDistance(norm(name), norm(k))
		if dist < bestDist && (dist == 0 || len(name) > 3) {
			best, bestDist = k, dist
		}
	}
	if best == "" {
		return "; expected one of: " + strings.Join(known, ", ")
	}
	return fmt.Sprintf("; did you mean %s?", best)
}

// editDistance is the Levenshtein distance, for short key names only.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt
	}
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

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

// required reports an empty required value, naming the unset environment
// variable when that is why it is empty.
func (d *decoder) required(key, what string) {
	if vars := d.unset[key]; len(vars) > 0 {
		d.fail(key, "%s is empty: environment variable %s is not set", what, strings.Join(vars, ", "))
		return
	}
	d.fail(key, "%s is required", what)
}

func (d *decoder) positive(key string, v Duration) {
	if v <= 0 {
		d.fail(key, "must be a duration greater than 0")
	}
}

func (d *decoder) validate(c *Config) {
	d.listen("server.listen", c.Server.Listen)
	if c.Server.MaxBody <= 0 {
		d.fail("server.max_body", "must be greater than 0")
	}
	d.listen("admin.listen", c.Admin.Listen)
	if c.Admin.Listen != "" && c.Admin.Listen == c.Server.Listen && !strings.HasSuffix(c.Admin.Listen, ":0") {
		d.fail("admin.listen", "must differ from server.listen: the admin API needs its own listener")
	}
	d.tokens(c.Admin.Tokens)
	d.storage(c.Storage)
	d.positive("dedupe.ttl", c.Dedupe.TTL)
	d.positive("retention", c.Retention)
	d.positive("delivery.timeout", c.Delivery.Timeout)
	d.retry(c.Delivery.Retry, "delivery.retry.", func(string) bool { return true })
	byID := d.sources(c.Sources)
	d.endpoints(c.Endpoints, byID)
}

func (d *decoder) listen(key, addr string) {
	if addr == "" {
		d.required(key, "listen address")
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		d.fail(key, "must be host:port, e.g. \":8080\" or \"127.0.0.1:8081\"")
		return
	}
	if n, err := strconv.Atoi(port); port == "" || (err == nil && (n < 0 || n > 65535)) {
		d.fail(key, "port must be between 0 and 65535")
	}
}

func (d *decoder) tokens(tokens []TokenConfig) {
	if len(tokens) == 0 {
		d.fail("admin.tokens", "at least one token is required (the admin API is never open)")
		return
	}
	first := map[string]int{}
	for i, t := range tokens {
		key := fmt.Sprintf("admin.tokens[%d].token", i)
		if t.Token == "" {
			d.required(key, "token")
			continue
		}
		if j, dup := first[t.Token]; dup {
			d.fail(key, "duplicate token: same as admin.tokens[%d].token", j)
			continue
		}
		first[t.Token] = i
	}
}

func (d *decoder) storage(s StorageConfig) {
	switch s.Driver {
	case "badger":
	case "postgres":
		d.fail("storage.driver", "postgres is not supported yet; use badger")
	case "":
		d.required("storage.driver", "driver")
	default:
		d.fail("storage.driver", "unknown driver %q; want badger", s.Driver)
	}
	if s.Path == "" {
		d.required("storage.path", "path")
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
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// id checks an ID's syntax and uniqueness; first maps IDs to their index.
func (d *decoder) id(key, id, list string, first map[string]int) bool {
	switch {
	case id == "":
		d.required(key, "id")
		return false
	case !idPattern.MatchString(id):
		d.fail(key, "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
		return false
	}
	if j, dup := first[id]; dup {
		d.fail(key, "duplicate id %q: same as %s[%d]", id, list, j)
		return false
	}
	return true
}

func (d *decoder) tenant(key, tenant string) {
	if tenant == "" {
		d.fail(key, "must not be empty; leave it out for %q", DefaultTenant)
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
	for j, s := range v.Secrets {
		k := fmt.Sprintf("%s[%d]", key, j)
		switch {
		case s == "":
			d.required(k, "secret")
		case v.Scheme == "standard-webhooks" && !validWhsec(s, 1):
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
	case !validHeaderName(v.Header):
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
func validWhsec(s string, minLen int) bool {
	b64, ok := strings.CutPrefix(s, "whsec_")
	if !ok {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	return err == nil && len(raw) >= minLen
}

// minEndpointSecret is the Standard Webhooks minimum secret length in bytes.
const minEndpointSecret = 24

func (d *decoder) endpoints(endpoints []EndpointConfig, sources map[string]*SourceConfig) {
	first := map[string]int{}
	for i := range endpoints {
		e := &endpoints[i]
		key := fmt.Sprintf("endpoints[%d]", i)
		if d.id(key+".id", e.ID, "endpoints", first) {
			first[e.ID] = i
		}
		d.tenant(key+".tenant", e.Tenant)
		d.url(key+".url", e.URL)
		if e.Secret != "" && !validWhsec(e.Secret, minEndpointSecret) {
			d.fail(key+".secret", "must be whsec_ followed by base64 of at least %d bytes; leave it out to have one generated", minEndpointSecret)
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
	// The URL is never quoted: it may carry credentials.
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		d.fail(key, "is not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		d.fail(key, "must be an absolute http:// or https:// URL")
	case u.Hostname() == "":
		d.fail(key, "must have a host")
	case u.User != nil:
		d.fail(key, "must not contain user info; put credentials in headers")
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
	for j, g := range globs {
		k := fmt.Sprintf("%s[%d]", key, j)
		if g == "" {
			d.required(k, "event type glob")
		} else if _, err := path.Match(g, ""); err != nil {
			d.fail(k, "invalid glob %q: %v", g, err)
		}
	}
}

// reservedHeaders are set by hookgate on every delivery (SPEC section 4) or
// frame the HTTP request; an endpoint's static headers must not replace them.
var reservedHeaders = []string{
	"content-type", "content-length", "host", "user-agent", "idempotency-key",
	"connection", "transfer-encoding", "te", "trailer", "upgrade", "keep-alive", "proxy-connection",
}

// reservedHeaderPrefixes are the Standard Webhooks and hookgate header families.
var reservedHeaderPrefixes = []string{"webhook-", "hookgate-"}

func (d *decoder) headers(h map[string]string, key string) {
	names := slices.Sorted(maps.Keys(h))
	seen := map[string]string{}
	for _, name := range names {
		k := joinKey(key, name)
		lower := strings.ToLower(name)
		switch {
		case !validHeaderName(name):
			d.fail(k, "is not a valid header name")
		case slices.Contains(reservedHeaders, lower) || hasAnyPrefix(lower, reservedHeaderPrefixes):
			d.fail(k, "is set by hookgate and cannot be overridden")
		case seen[lower] != "":
			d.fail(k, "duplicate header: same as %s (header names are case-insensitive)", seen[lower])
		case !validHeaderValue(h[name]):
			d.fail(k, "value contains characters not allowed in a header (control characters or line breaks)")
		}
		seen[lower] = cmp.Or(seen[lower], name)
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(s, p) })
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
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
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func (d *decoder) endpointLimits(e *EndpointConfig, key string) {
	if d.set[key+".timeout"] {
		d.positive(key+".timeout", e.Timeout)
	}
	if e.MaxInFlight < 1 {
		d.fail(key+".max_in_flight", "must be at least 1")
	}
	if e.RateLimit < 0 {
		d.fail(key+".rate_limit", "must be 0 (unlimited) or more")
	}
	prefix := key + ".retry."
	d.retry(*e.Retry, prefix, func(field string) bool { return d.set[prefix+field] })
}
