package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// testSecret is a valid standard-webhooks secret for the sources of the
// configs below.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// base is the smallest valid config. It is two lines long, so the first line
// a test appends to it is line 3.
const base = "admin:\n  tokens: [{token: admin-token-0123456789}]\n"

// withSources appends two sources (s1 of tenant acme, s2 of tenant default)
// on lines 3-8; what a test appends starts at line 9.
func withSources(rest string) string {
	return base + `sources:
  - id: s1
    tenant: acme
    verify: {scheme: none}
  - id: s2
    verify: {scheme: none}
` + rest
}

// withEndpoint appends the sources and one endpoint of tenant acme on lines
// 9-12 whose url is url; extra endpoint keys start at line 13.
func withEndpoint(url, extra string) string {
	return withSources(fmt.Sprintf("endpoints:\n  - id: e1\n    tenant: acme\n    url: %s\n", url) + extra)
}

// ep is withEndpoint with a valid URL.
func ep(extra string) string { return withEndpoint("https://example.com/hooks", extra) }

// source appends one source on lines 3-4 ("sources:", "- id: s1") whose
// remaining keys (e.g. its verify line, 5) come from rest.
func source(rest string) string { return base + "sources:\n  - id: s1\n" + rest }

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func parse(t *testing.T, yaml string, vars map[string]string) (*Config, error) {
	t.Helper()
	cfg, err := Parse([]byte(yaml), "test.yaml", env(vars))
	if (cfg == nil) == (err == nil) {
		t.Fatalf("Parse returned cfg=%v err=%v: want exactly one of them", cfg, err)
	}
	return cfg, err
}

func mustParse(t *testing.T, yaml string, vars map[string]string) *Config {
	t.Helper()
	cfg, err := parse(t, yaml, vars)
	if err != nil {
		t.Fatalf("Parse: unexpected error:\n%v", err)
	}
	return cfg
}

func configErrors(t *testing.T, err error) Errors {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is %T (%v), want Errors", err, err)
	}
	return errs
}

// wantError asserts that err holds exactly one Error, at key and line,
// whose message contains msg, and that it prints as "test.yaml:<line>: <key>: ".
func wantError(t *testing.T, err error, key string, line int, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s at line %d: %s", key, line, msg)
	}
	errs := configErrors(t, err)
	if len(errs) != 1 {
		t.Fatalf("got %d errors, want 1 (%s at line %d):\n%v", len(errs), key, line, err)
	}
	e := errs[0]
	if e.Key != key || e.Line != line || !strings.Contains(e.Msg, msg) {
		t.Fatalf("got %q\nwant key %q, line %d, message containing %q", e.Error(), key, line, msg)
	}
	named := key // an entry with an id is named by it too (TestConfigErrorsNameEntries)
	if i := strings.IndexByte(key, ']'); i > 0 && e.ID != "" {
		named = key[:i+1] + " (id " + e.ID + ")" + key[i+1:]
	}
	prefix := fmt.Sprintf("test.yaml:%d: %s: ", line, named)
	if key == "" {
		prefix = fmt.Sprintf("test.yaml:%d: ", line)
	}
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("Error() = %q, want prefix %q", err.Error(), prefix)
	}
}

// TestConfigErrorsNameEntries: an error inside a list entry with an id
// names the id beside the index, as the user knows the entry by it; an
// entry whose id is missing or invalid is named by its index alone.
func TestConfigErrorsNameEntries(t *testing.T) {
	_, err := parse(t, `sources:
  - {id: signed, verify: {scheme: none}}
  - id: naked-src
    verify: {scheme: hmac-sha257}
endpoints:
  - {id: ep-1, url: "ftp://x.example/"}
  - {id: "bad id!", url: "ftp://y.example/"}
  - {url: "https://z.example/", timeout: 0s}
`, nil)
	if err == nil {
		t.Fatal("no error")
	}
	got := strings.Split(err.Error(), "\n")
	want := []string{
		"test.yaml:1: admin.tokens: ",
		"test.yaml:4: sources[1] (id naked-src).verify.scheme: ",
		"test.yaml:6: endpoints[0] (id ep-1).url: ",
		"test.yaml:7: endpoints[1].id: ",
		"test.yaml:7: endpoints[1].url: ",
		"test.yaml:8: endpoints[2].id: ",
		"test.yaml:8: endpoints[2].timeout: ",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(got), len(want), err)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
}

func TestConfigSpecExample(t *testing.T) {
	data, err := os.ReadFile("testdata/spec.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustParse(t, string(data), map[string]string{
		"HOOKGATE_ADMIN_TOKEN": "admin-secret-token",
		"STRIPE_WHSEC":         "whsec_stripe_test_secret",
	})

	if got := cfg.Admin.Tokens; len(got) != 1 || got[0] != (TokenConfig{Token: "admin-secret-token", Tenant: ""}) {
		t.Errorf("admin.tokens = %+v", got)
	}
	if cfg.Server != (ServerConfig{Listen: ":8080", MaxBody: 1 << 20}) {
		t.Errorf("server = %+v", cfg.Server)
	}
	if cfg.Dedupe.TTL.D() != 72*time.Hour || cfg.Retention.D() != 720*time.Hour {
		t.Errorf("dedupe.ttl = %v, retention = %v", cfg.Dedupe.TTL, cfg.Retention)
	}
	s := cfg.Sources[0]
	wantVerify := VerifyConfig{Scheme: "stripe", Secrets: []string{"whsec_stripe_test_secret"}, Tolerance: Duration(5 * time.Minute)}
	if s.ID != "stripe" || s.Tenant != "acme" || !reflect.DeepEqual(*s.Verify, wantVerify) ||
		s.EventID != "json:/id" || s.EventType != "json:/type" {
		t.Errorf("source = %+v, verify = %+v", s, *s.Verify)
	}
	e := cfg.Endpoints[0]
	if e.ID != "billing" || e.Tenant != "acme" || e.URL != "https://billing.example.com/hooks" ||
		e.Secret != "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" || !reflect.DeepEqual(e.Sources, []string{"stripe"}) ||
		!reflect.DeepEqual(e.EventTypes, []string{"invoice.*"}) || !reflect.DeepEqual(e.Headers, map[string]string{"X-Team": "billing"}) ||
		e.Timeout.D() != 10*time.Second || e.MaxInFlight != 10 || e.RateLimit != 50 {
		t.Errorf("endpoint = %+v", e)
	}
	wantRetry := DefaultRetry()
	wantRetry.MaxAttempts = 5
	if *e.Retry != wantRetry {
		t.Errorf("endpoint retry = %+v, want %+v", *e.Retry, wantRetry)
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg := mustParse(t, base+`sources:
  - id: hooks
    verify: {scheme: hmac, secrets: [k], header: X-Signature}
endpoints:
  - id: e1
    url: http://localhost:9000/
`, nil)
	want := Config{
		Server:    ServerConfig{Listen: DefaultServerListen, MaxBody: DefaultMaxBody},
		Admin:     AdminConfig{Listen: DefaultAdminListen, Tokens: []TokenConfig{{Token: "admin-token-0123456789"}}},
		Storage:   StorageConfig{Driver: "badger", Path: "./data", Postgres: PostgresConfig{MaxConns: DefaultPostgresMaxConns}},
		Dedupe:    DedupeConfig{TTL: Duration(72 * time.Hour)},
		Retention: Duration(720 * time.Hour),
		Delivery: DeliveryConfig{Timeout: Duration(15 * time.Second), Retry: RetryConfig{
			InitialInterval: Duration(5 * time.Second), Multiplier: 2, MaxInterval: Duration(time.Hour),
			Randomization: 0.2, MaxAttempts: 30, MaxElapsed: Duration(24 * time.Hour),
		}},
		Sources: []SourceConfig{{ID: "hooks", Tenant: "default", Verify: &VerifyConfig{
			Scheme: "hmac", Secrets: []string{"k"}, Tolerance: Duration(5 * time.Minute),
			Header: "X-Signature", Algorithm: "sha256", Encoding: "hex",
		}}},
		Endpoints: []EndpointConfig{{
			ID: "e1", Tenant: "default", URL: "http://localhost:9000/", Timeout: Duration(15 * time.Second),
			MaxInFlight: 10, RateLimit: 0, Retry: &RetryConfig{
				InitialInterval: Duration(5 * time.Second), Multiplier: 2, MaxInterval: Duration(time.Hour),
				Randomization: 0.2, MaxAttempts: 30, MaxElapsed: Duration(24 * time.Hour),
			},
		}},
	}
	if !reflect.DeepEqual(*cfg, want) {
		t.Errorf("got  %+v\nwant %+v", *cfg, want)
	}
}

// TestConfigNullKeepsDefault: a key with nothing after it (every child
// commented out) means "not set", not "zero".
func TestConfigNullKeepsDefault(t *testing.T) {
	cfg := mustParse(t, base+"dedupe:\n  # ttl: 1h\ndelivery:\n  timeout: ~\n", nil)
	if cfg.Dedupe.TTL != DefaultDedupeTTL || cfg.Delivery.Timeout != DefaultDeliveryTimeout {
		t.Errorf("dedupe.ttl = %v, delivery.timeout = %v; want defaults", cfg.Dedupe.TTL, cfg.Delivery.Timeout)
	}
}

func TestConfigRetryOverrideInherits(t *testing.T) {
	cfg := mustParse(t, withSources(`delivery:
  timeout: 3s
  retry:
    initial_interval: 1s
    multiplier: 3
    max_interval: 10m
    randomization: 0.5
    max_attempts: 8
    max_elapsed: 2h
endpoints:
  - id: partial
    url: https://a.example.com/
    retry: {max_attempts: 3, max_interval: 1m}
  - id: inherit
    url: https://b.example.com/
    timeout: 1s
`), nil)
	base := RetryConfig{
		InitialInterval: Duration(time.Second), Multiplier: 3, MaxInterval: Duration(10 * time.Minute),
		Randomization: 0.5, MaxAttempts: 8, MaxElapsed: Duration(2 * time.Hour),
	}
	if cfg.Delivery.Retry != base {
		t.Fatalf("delivery.retry = %+v, want %+v", cfg.Delivery.Retry, base)
	}
	partial := base
	partial.MaxAttempts, partial.MaxInterval = 3, Duration(time.Minute)
	if got := *cfg.Endpoints[0].Retry; got != partial {
		t.Errorf("partial override = %+v, want %+v", got, partial)
	}
	if got := *cfg.Endpoints[1].Retry; got != base {
		t.Errorf("no override = %+v, want %+v", got, base)
	}
	if cfg.Endpoints[1].Retry == &cfg.Delivery.Retry || cfg.Endpoints[0].Retry == cfg.Endpoints[1].Retry {
		t.Error("endpoints share a retry policy: changing one would change the others")
	}
	if cfg.Endpoints[0].Timeout.D() != 3*time.Second || cfg.Endpoints[1].Timeout.D() != time.Second {
		t.Errorf("timeouts = %v, %v; want inherited 3s and own 1s", cfg.Endpoints[0].Timeout, cfg.Endpoints[1].Timeout)
	}
}

func TestConfigAlias(t *testing.T) {
	cfg := mustParse(t, withSources(`endpoints:
  - id: e1
    url: https://a.example.com/
    retry: &fast {max_attempts: 4}
  - id: e2
    url: https://b.example.com/
    retry: *fast
`), nil)
	if cfg.Endpoints[1].Retry.MaxAttempts != 4 || cfg.Endpoints[1].Retry.Multiplier != DefaultRetryMultiplier {
		t.Errorf("aliased retry = %+v", *cfg.Endpoints[1].Retry)
	}
}

func TestConfigEnvExpansion(t *testing.T) {
	cfg := mustParse(t, `server:
  listen: ":${PORT:-8080}"
  max_body: ${MAX_BODY:-2MiB}
admin:
  tokens:
    - token: ${TOKEN}
      tenant: ${TENANT:-}
delivery:
  allow_private_targets: ${PRIV:-true}
  retry:
    max_attempts: ${ATTEMPTS:-7}
    multiplier: ${MULT}
sources:
  - id: ${SOURCE_ID:-s1}
    verify: {scheme: none}
endpoints:
  - id: e1
    url: "${URL}"
    headers: {X-Price: "$$5 ${CURRENCY:-EUR}", X-Dollar: "a$b"}
`, map[string]string{
		"PORT":  "9090",
		"TOKEN": "tok: {not: yaml} # - x", // stays one string: expansion runs after parsing
		"PRIV":  "",                       // set but empty: the default applies, as in the shell
		"MULT":  "1.5",
		"URL":   "https://example.com/${NOT_EXPANDED_TWICE}",
	})
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", cfg.Server.Listen, ":9090"},
		{"max_body", cfg.Server.MaxBody, Size(2 << 20)},
		{"token", cfg.Admin.Tokens[0].Token, "tok: {not: yaml} # - x"},
		{"tenant", cfg.Admin.Tokens[0].Tenant, ""},
		{"allow_private_targets", cfg.Delivery.AllowPrivateTargets, true},
		{"max_attempts", cfg.Delivery.Retry.MaxAttempts, 7},
		{"multiplier", cfg.Delivery.Retry.Multiplier, 1.5},
		{"source id", cfg.Sources[0].ID, "s1"},
		{"url", cfg.Endpoints[0].URL, "https://example.com/${NOT_EXPANDED_TWICE}"},
		{"X-Price", cfg.Endpoints[0].Headers["X-Price"], "$5 EUR"},
		{"X-Dollar", cfg.Endpoints[0].Headers["X-Dollar"], "a$b"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
}

func TestConfigEnvErrors(t *testing.T) {
	cases := []struct {
		name, yaml, key string
		line            int
		msg             string
	}{
		{"unset required", "admin:\n  tokens:\n    - token: ${ADMIN_TOKEN}\n", "admin.tokens[0].token", 3,
			"environment variable ADMIN_TOKEN is not set"},
		{"unterminated", base + "storage:\n  path: ${DATA\n", "storage.path", 4, "unterminated ${"},
		{"bad name", base + "storage:\n  path: ${1DATA}\n", "storage.path", 4, "invalid ${…} reference"},
		{"bad number after expansion", base + "delivery:\n  retry:\n    max_attempts: ${N:-many}\n",
			"delivery.retry.max_attempts", 5, `invalid integer "many"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse(t, c.yaml, nil)
			wantError(t, err, c.key, c.line, c.msg)
		})
	}
}

// A token or secret read from a file or a secret store often ends in a
// newline. HTTP trims header values, so such a token could never be
// presented, and a secret used as it is made every request fail to
// verify, while check-config said OK. (A Standard Webhooks secret is
// base64, whose decoding skips a newline: it worked, and still does.)
func TestConfigValuesWithSurroundingWhitespace(t *testing.T) {
	vars := map[string]string{"T": "operator-token-0123\n", "S": " s3cr3t", "H": "s3cr3t\n", "W": testSecret + "\n"}
	cases := []struct{ name, yaml, key string }{
		{"token", "admin:\n  tokens:\n    - token: ${T}\n", "admin.tokens[0].token"},
		{"github secret", source("    verify: {scheme: github, secrets: [\"${S}\"]}\n"), "sources[0].verify.secrets[0]"},
		{"hmac secret", source("    verify: {scheme: hmac, header: X-Sig, secrets: [ok, \"${H}\"]}\n"), "sources[0].verify.secrets[1]"},
	}
	mustParse(t, source("    verify: {scheme: standard-webhooks, secrets: [\"${W}\"]}\n"), vars)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse(t, c.yaml, vars)
			errs := configErrors(t, err)
			if len(errs) != 1 || errs[0].Key != c.key || !strings.Contains(errs[0].Msg, "whitespace") {
				t.Fatalf("got %v; want one error at %s about whitespace", err, c.key)
			}
			for _, v := range vars {
				if strings.Contains(err.Error(), strings.TrimSpace(v)) {
					t.Fatalf("the error shows the value: %v", err)
				}
			}
		})
	}
}

func TestExpandEnv(t *testing.T) {
	lookup := env(map[string]string{"A": "1", "E": ""})
	cases := []struct {
		in, want string
		unset    []string
	}{
		{"plain", "plain", nil},
		{"${A}", "1", nil},
		{"x${A}y${A}", "x1y1", nil},
		{"${B}", "", []string{"B"}},
		{"${B:-d}", "d", nil},
		{"${E:-d}", "d", nil},
		{"${A:-d}", "1", nil},
		{"${B:-}", "", nil},
		{"${B:-a:-b}", "a:-b", nil},
		{"$$", "$", nil},
		{"$${A}", "${A}", nil},
		{"$A $ end$", "$A $ end$", nil},
	}
	for _, c := range cases {
		got, err := expandEnv(c.in, lookup)
		if err != nil || got.value != c.want || !reflect.DeepEqual(got.unset, c.unset) {
			t.Errorf("expandEnv(%q) = %q, unset %v, %v; want %q, unset %v", c.in, got.value, got.unset, err, c.want, c.unset)
		}
	}
	for _, in := range []string{"${", "${A", "${}", "${A-b}", "${9}", "${A B}"} {
		if _, err := expandEnv(in, lookup); err == nil {
			t.Errorf("expandEnv(%q): no error", in)
		}
	}
}

// TestConfigErrorsNeverShowSecrets: a wrong secret is named by its key, never
// printed; the same goes for a URL, which may carry credentials.
func TestConfigErrorsNeverShowSecrets(t *testing.T) {
	vars := map[string]string{
		"TOKEN":      "S3CRET-admin-token",
		"SW_SECRET":  "S3CRET-not-a-whsec",
		"BAD_B64":    "whsec_S3CRET!!",
		"EP_SECRET":  "whsec_S3CRET",
		"URL":        "https://user:S3CRET-password@example.com/",
		"HMAC_KEY":   "S3CRET-hmac-key",
		"NONE_KEY":   "S3CRET-none",
		"WRONG_TYPE": "S3CRET-wrong-type",
	}
	yaml := `admin:
  tokens:
    - token: ${TOKEN}
    - token: ${TOKEN}
sources:
  - id: sw
    verify: {scheme: standard-webhooks, secrets: ["${SW_SECRET}", "${BAD_B64}"]}
  - id: hm
    verify: {scheme: hmac, secrets: ["${HMAC_KEY}"], algorithm: md5}
  - id: no
    verify: {scheme: none, secrets: ["${NONE_KEY}"]}
  - id: wt
    verify: {scheme: github, secrets: {a: "${WRONG_TYPE}"}}
endpoints:
  - id: e1
    url: ${URL}
    secret: ${EP_SECRET}
  - id: e2
    url: https://example.com/
    secret: ${BAD_B64}
`
	_, err := parse(t, yaml, vars)
	errs := configErrors(t, err)
	wantKeys := []string{
		"admin.tokens[1].token",
		"sources[0].verify.secrets[0]", "sources[0].verify.secrets[1]",
		"sources[1].verify.header", "sources[1].verify.algorithm",
		"sources[2].verify.secrets",
		"sources[3].verify.secrets",
		"endpoints[0].url", "endpoints[0].secret",
		"endpoints[1].secret",
	}
	var gotKeys []string
	for _, e := range errs {
		gotKeys = append(gotKeys, e.Key)
	}
	if !reflect.DeepEqual(gotKeys, wantKeys) {
		t.Errorf("error keys = %q\nwant %q\n%v", gotKeys, wantKeys, err)
	}
	if strings.Contains(err.Error(), "S3CRET") {
		t.Errorf("an error shows a secret:\n%v", err)
	}
}

func TestConfigSeveralErrorsAtOnce(t *testing.T) {
	_, err := parse(t, `server:
  listen: nope
  max_body: lots
admin:
  tokens: []
sources:
  - id: "bad id"
    verify: {scheme: stripe}
endpoints:
  - id: e1
    url: ftp://example.com/
    colour: blue
`, nil)
	errs := configErrors(t, err)
	want := []struct {
		line int
		key  string
	}{
		{2, "server.listen"}, {3, "server.max_body"}, {5, "admin.tokens"}, {7, "sources[0].id"},
		{8, "sources[0].verify.secrets"}, {11, "endpoints[0].url"}, {12, "endpoints[0].colour"},
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), err)
	}
	for i, w := range want {
		if errs[i].Line != w.line || errs[i].Key != w.key {
			t.Errorf("error %d = %q, want line %d key %s", i, errs[i].Error(), w.line, w.key)
		}
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != len(want) {
		t.Errorf("Error() has %d lines, want one per error:\n%v", len(lines), err)
	}
}

// TestConfigRules has one failing case per rule, each asserting the key and
// the line of the only error it produces.
func TestConfigRules(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		key  string
		line int
		msg  string
	}{
		// document
		{"empty file", "", "admin.tokens", 1, "at least one token is required"},
		{"comments only", "# nothing\n", "admin.tokens", 1, "at least one token is required"},
		{"top level list", "- server\n", "", 1, "top level must be a mapping"},
		{"top level scalar", "just text\n", "", 1, "top level must be a mapping of keys such as server, admin, sources; got a single value"},
		{"dangling text", base + "x", "", 3, "invalid YAML: could not find expected ':'"},
		{"two documents", base + "---\nserver: {}\n", "", 3, "only one YAML document"},
		{"syntax error", base + "server:\n\tlisten: x\n", "", 4, "invalid YAML"},
		{"non-string key", base + "? [a]\n: b\n", "", 3, "mapping keys must be plain strings"},

		// strict decoding
		{"unknown key", base + "servr: {}\n", "servr", 3, "unknown key; did you mean server?"},
		{"unknown nested key", base + "server:\n  maxBody: 1MiB\n", "server.maxBody", 4, "did you mean max_body?"},
		{"unknown key lists known", base + "storage:\n  flavour: x\n", "storage.flavour", 4, "expected one of: driver, path, postgres"},
		{"unprintable key is quoted", base + "\"a\\nb\": 1\n", `"a\nb"`, 3, "unknown key"},
		{"duplicate key", base + "dedupe:\n  ttl: 1h\n  ttl: 2h\n", "dedupe.ttl", 5, "duplicate key (first at line 4)"},
		{"mapping expected", base + "server: [1]\n", "server", 3, "expected a mapping, got a list"},
		{"list expected", base + "sources: {id: x}\n", "sources", 3, "expected a list, got a mapping"},
		{"value expected", base + "server:\n  listen: [\":1\"]\n", "server.listen", 4, "expected a single value, got a list"},
		{"duration without unit", base + "dedupe:\n  ttl: 15\n", "dedupe.ttl", 4, `invalid duration "15"`},
		{"bad size", base + "server:\n  max_body: 1MB2\n", "server.max_body", 4, `invalid size "1MB2"`},
		{"bad number", base + "delivery:\n  retry:\n    multiplier: two\n", "delivery.retry.multiplier", 5, `invalid number "two"`},
		{"infinite number", base + "delivery:\n  retry:\n    multiplier: .inf\n", "delivery.retry.multiplier", 5, "invalid number"},
		{"bad integer", base + "delivery:\n  retry:\n    max_attempts: 1.5\n", "delivery.retry.max_attempts", 5, `invalid integer "1.5"`},
		{"yes is not a boolean", base + "delivery:\n  allow_private_targets: yes\n", "delivery.allow_private_targets", 4, `invalid boolean "yes"`},

		// listeners
		{"listen without port", base + "server:\n  listen: \"8080\"\n", "server.listen", 4, "must be host:port"},
		{"listen port range", base + "server:\n  listen: \":99999\"\n", "server.listen", 4, "port must be between 0 and 65535"},
		{"listen port not a port", base + "server:\n  listen: \":abc\"\n", "server.listen", 4, "port must be between 0 and 65535 or a service name"},
		{"listen port negative", base + "server:\n  listen: \":-1\"\n", "server.listen", 4, "port must be between 0 and 65535"},
		{"listen empty", base + "server:\n  listen: \"\"\n", "server.listen", 4, "listen address is required"},
		{"max_body zero", base + "server:\n  max_body: 0\n", "server.max_body", 4, "greater than 0"},
		{"max_body over 32MiB", base + "server:\n  max_body: 70MiB\n", "server.max_body", 4, "at most 32MiB"},
		{"same listener", "server: {listen: \":9000\"}\nadmin:\n  listen: \":9000\"\n  tokens: [{token: 0123456789abcdef}]\n", "admin.listen", 3, "must differ from server.listen"},

		// tokens
		{"no tokens", "admin:\n  tokens: []\n", "admin.tokens", 2, "at least one token is required"},
		{"no admin", "server: {}\n", "admin.tokens", 1, "at least one token is required"},
		{"empty token", "admin:\n  tokens:\n    - token: \"\"\n", "admin.tokens[0].token", 3, "token is required"},
		{"token missing", "admin:\n  tokens:\n    - {tenant: acme}\n", "admin.tokens[0].token", 3, "token is required"},
		{"duplicate token", "admin:\n  tokens:\n    - token: abc\n    - token: abc\n      tenant: acme\n", "admin.tokens[1].token", 4, "duplicate token: same as admin.tokens[0].token"},
		{"token with a line break", "admin:\n  tokens:\n    - token: \"line-one\\nline-two\"\n", "admin.tokens[0].token", 3, "holds a control character"},

		// storage and durations
		{"postgres without a dsn", base + "storage:\n  driver: postgres\n", "storage.postgres.dsn", 3, "dsn (a postgres:// URL"},
		{"postgres dsn that does not parse", base + "storage:\n  driver: postgres\n  postgres:\n    dsn: \"postgres://u:hunter2@h:notaport/db\"\n", "storage.postgres.dsn", 6, "is not a PostgreSQL connection string"},
		{"postgres max_conns 0", base + "storage:\n  driver: postgres\n  postgres:\n    dsn: postgres://h/db\n    max_conns: 0\n", "storage.postgres.max_conns", 7, "between 1 and 1000"},
		{"unknown driver", base + "storage:\n  driver: sqlite\n", "storage.driver", 4, `unknown driver "sqlite"`},
		{"empty driver", base + "storage:\n  driver: \"\"\n", "storage.driver", 4, "driver is required"},
		{"empty path", base + "storage:\n  path: \"\"\n", "storage.path", 4, "path is required"},
		{"dedupe ttl zero", base + "dedupe:\n  ttl: 0s\n", "dedupe.ttl", 4, "greater than 0"},
		{"retention negative", base + "retention: -1h\n", "retention", 3, "greater than 0"},
		{"delivery timeout zero", base + "delivery:\n  timeout: 0s\n", "delivery.timeout", 4, "greater than 0"},
		{"delivery timeout over an hour", base + "delivery:\n  timeout: 2562047h\n", "delivery.timeout", 4, "at most 1h0m0s"},

		// retry
		{"multiplier below 1", base + "delivery:\n  retry:\n    multiplier: 0.5\n", "delivery.retry.multiplier", 5, "at least 1"},
		{"randomization above 1", base + "delivery:\n  retry:\n    randomization: 1.5\n", "delivery.retry.randomization", 5, "between 0 and 1"},
		{"randomization negative", base + "delivery:\n  retry:\n    randomization: -0.1\n", "delivery.retry.randomization", 5, "between 0 and 1"},
		{"max_attempts zero", base + "delivery:\n  retry:\n    max_attempts: 0\n", "delivery.retry.max_attempts", 5, "at least 1"},
		{"initial above max", base + "delivery:\n  retry:\n    initial_interval: 2h\n", "delivery.retry.initial_interval", 5, "must not exceed max_interval (1h0m0s)"},
		{"initial zero", base + "delivery:\n  retry:\n    initial_interval: 0s\n", "delivery.retry.initial_interval", 5, "greater than 0"},
		{"max_interval zero", base + "delivery:\n  retry:\n    max_interval: 0s\n", "delivery.retry.max_interval", 5, "greater than 0"},
		{"max_elapsed zero", base + "delivery:\n  retry:\n    max_elapsed: 0s\n", "delivery.retry.max_elapsed", 5, "greater than 0"},

		// sources
		{"source id missing", base + "sources:\n  - verify: {scheme: none}\n", "sources[0].id", 4, "id is required"},
		{"source id charset", base + "sources:\n  - id: \"bad id\"\n    verify: {scheme: none}\n", "sources[0].id", 4, "must be 1-64 letters"},
		{"source id leading dot", base + "sources:\n  - id: .hidden\n    verify: {scheme: none}\n", "sources[0].id", 4, "starting with a letter or digit"},
		{"source id too long", base + "sources:\n  - id: " + strings.Repeat("a", 65) + "\n    verify: {scheme: none}\n", "sources[0].id", 4, "1-64"},
		{"source id duplicate across tenants", base + "sources:\n  - id: s1\n    tenant: a\n    verify: {scheme: none}\n  - id: s1\n    tenant: b\n    verify: {scheme: none}\n",
			"sources[1].id", 7, `duplicate id "s1": same as sources[0]`},
		{"source tenant empty", source("    tenant: \"\"\n    verify: {scheme: none}\n"), "sources[0].tenant", 5, "must not be empty"},
		{"verify missing", source(""), "sources[0].verify", 4, "a source must say how it is verified; write scheme: none to accept unsigned requests"},
		{"verify null", source("    verify:\n"), "sources[0].verify", 5, "a source must say how it is verified"},
		{"verify not a mapping", source("    verify: stripe\n"), "sources[0].verify", 5, "expected a mapping, got a single value"},
		{"scheme missing", source("    verify: {secrets: [x]}\n"), "sources[0].verify.scheme", 5, "is required"},
		{"scheme unknown", source("    verify: {scheme: stripee, secrets: [x]}\n"), "sources[0].verify.scheme", 5, `unknown scheme "stripee"`},
		{"secrets missing", source("    verify: {scheme: stripe}\n"), "sources[0].verify.secrets", 5, "at least one secret is required for scheme stripe"},
		{"secrets empty list", source("    verify: {scheme: slack, secrets: []}\n"), "sources[0].verify.secrets", 5, "at least one secret is required"},
		{"secret empty", source("    verify: {scheme: github, secrets: [\"\"]}\n"), "sources[0].verify.secrets[0]", 5, "secret is required"},
		{"secret unset variable", source("    verify:\n      scheme: shopify\n      secrets:\n        - ok\n        - ${SHOPIFY_SECRET}\n"),
			"sources[0].verify.secrets[1]", 9, "environment variable SHOPIFY_SECRET is not set"},
		{"standard-webhooks without whsec_", source("    verify: {scheme: standard-webhooks, secrets: [c2VjcmV0]}\n"), "sources[0].verify.secrets[0]", 5, "must be whsec_ followed by base64"},
		{"standard-webhooks bad base64", source("    verify: {scheme: standard-webhooks, secrets: [\"whsec_%%%\"]}\n"), "sources[0].verify.secrets[0]", 5, "must be whsec_ followed by base64"},
		{"none with secrets", source("    verify: {scheme: none, secrets: [x]}\n"), "sources[0].verify.secrets", 5, "takes no secrets"},
		{"hmac without header", source("    verify: {scheme: hmac, secrets: [x]}\n"), "sources[0].verify.header", 5, "header (scheme hmac) is required"},
		{"hmac bad header", source("    verify: {scheme: hmac, secrets: [x], header: \"X Sig\"}\n"), "sources[0].verify.header", 5, "not a valid header name"},
		{"hmac bad algorithm", source("    verify: {scheme: hmac, secrets: [x], header: X-Sig, algorithm: md5}\n"), "sources[0].verify.algorithm", 5, `unknown algorithm "md5"`},
		{"hmac bad encoding", source("    verify: {scheme: hmac, secrets: [x], header: X-Sig, encoding: base32}\n"), "sources[0].verify.encoding", 5, `unknown encoding "base32"`},
		{"hmac field on other scheme", source("    verify:\n      scheme: stripe\n      secrets: [x]\n      prefix: \"v1=\"\n"), "sources[0].verify.prefix", 8, "only applies to scheme hmac"},
		{"tolerance zero", source("    verify: {scheme: stripe, secrets: [x], tolerance: 0s}\n"), "sources[0].verify.tolerance", 5, "greater than 0"},
		{"tolerance on github", source("    verify: {scheme: github, secrets: [x], tolerance: 10m}\n"), "sources[0].verify.tolerance", 5, "scheme github signs no timestamp"},
		{"tolerance on hmac", source("    verify: {scheme: hmac, secrets: [x], header: X-Sig, tolerance: 10m}\n"), "sources[0].verify.tolerance", 5, "scheme hmac signs no timestamp"},
		{"tolerance on none", source("    verify:\n      scheme: none\n      tolerance: 10m\n"), "sources[0].verify.tolerance", 7, "scheme none signs no timestamp"},
		{"bad event_id", source("    verify: {scheme: none}\n    event_id: \"body:/id\"\n"), "sources[0].event_id", 6, "unknown prefix"},
		{"bad event_type", source("    verify: {scheme: none}\n    event_type: \"json:/a+\"\n"), "sources[0].event_type", 6, "empty part"},

		// endpoints
		{"endpoint id missing", withSources("endpoints:\n  - url: https://example.com/\n"), "endpoints[0].id", 10, "id is required"},
		{"endpoint id charset", withSources("endpoints:\n  - id: e/1\n    url: https://example.com/\n"), "endpoints[0].id", 10, "must be 1-64 letters"},
		{"endpoint id duplicate", withSources("endpoints:\n  - id: e1\n    url: https://a.example.com/\n  - id: e1\n    tenant: acme\n    url: https://b.example.com/\n"),
			"endpoints[1].id", 12, `duplicate id "e1": same as endpoints[0]`},
		{"endpoint tenant empty", withSources("endpoints:\n  - id: e1\n    tenant: \"\"\n    url: https://example.com/\n"), "endpoints[0].tenant", 11, "must not be empty"},
		{"url missing", withSources("endpoints:\n  - id: e1\n"), "endpoints[0].url", 10, "url is required"},
		{"url relative", withEndpoint("/hooks", ""), "endpoints[0].url", 12, "absolute http:// or https://"},
		{"url ftp", withEndpoint("ftp://example.com/x", ""), "endpoints[0].url", 12, "absolute http:// or https://"},
		{"url without host", withEndpoint("\"https:///x\"", ""), "endpoints[0].url", 12, "must have a host"},
		{"url with userinfo", withEndpoint("https://u:p@example.com/", ""), "endpoints[0].url", 12, "must not contain user info"},
		{"url with port 0", withEndpoint("https://example.com:0/", ""), "endpoints[0].url", 12, "port outside 1-65535"},
		{"url with port 99999", withEndpoint("https://example.com:99999/", ""), "endpoints[0].url", 12, "port outside 1-65535"},
		{"url with a space in its query", withEndpoint("\"https://example.com/x?a b\"", ""), "endpoints[0].url", 12, "space in its query; write it as %20"},
		{"secret not whsec", ep("    secret: abc\n"), "endpoints[0].secret", 13, "must be whsec_ followed by base64 of at least 24 bytes"},
		{"secret too short", ep("    secret: whsec_MDEyMzQ1Njc4OWFiY2RlZg==\n"), "endpoints[0].secret", 13, "at least 24 bytes"},
		{"unknown source", ep("    sources: [s1, nope]\n"), "endpoints[0].sources[1]", 13, `unknown source "nope"`},
		{"source of other tenant", ep("    sources: [s2]\n"), "endpoints[0].sources[0]", 13, `source "s2" belongs to tenant "default", not "acme"`},
		{"bad glob", ep("    event_types: [\"invoice.*\", \"invoice.[\"]\n"), "endpoints[0].event_types[1]", 13, "invalid glob"},
		{"empty glob", ep("    event_types: [\"\"]\n"), "endpoints[0].event_types[0]", 13, "is required"},
		{"bad header name", ep("    headers: {\"X Team\": a}\n"), "endpoints[0].headers.X …", 13, "not a valid header name"},
		{"reserved content-type", ep("    headers: {content-type: text/plain}\n"), "endpoints[0].headers.content-type", 13, "set by hookgate"},
		{"reserved content-length", ep("    headers: {Content-Length: \"1\"}\n"), "endpoints[0].headers.Content-Length", 13, "set by hookgate"},
		{"reserved host", ep("    headers: {HOST: x}\n"), "endpoints[0].headers.HOST", 13, "set by hookgate"},
		{"reserved user-agent", ep("    headers: {User-Agent: x}\n"), "endpoints[0].headers.User-Agent", 13, "set by hookgate"},
		{"reserved idempotency-key", ep("    headers: {Idempotency-Key: x}\n"), "endpoints[0].headers.Idempotency-Key", 13, "set by hookgate"},
		{"reserved webhook-*", ep("    headers: {Webhook-Signature: x}\n"), "endpoints[0].headers.Webhook-Signature", 13, "set by hookgate"},
		{"reserved hookgate-*", ep("    headers: {HOOKGATE-Attempt: \"9\"}\n"), "endpoints[0].headers.HOOKGATE-Attempt", 13, "set by hookgate"},
		{"header twice", ep("    headers: {X-Team: a, x-team: b}\n"), "endpoints[0].headers.x-team", 13, "duplicate header: same as X-Team"},
		{"header value line break", ep("    headers: {X-A: \"a\\r\\nX-B: b\"}\n"), "endpoints[0].headers.X-A", 13, "not allowed in a header"},
		{"header value not a string", ep("    headers: {X-A: [a]}\n"), "endpoints[0].headers.X-A", 13, "expected a single value"},
		{"endpoint timeout zero", ep("    timeout: 0s\n"), "endpoints[0].timeout", 13, "greater than 0"},
		{"endpoint timeout over an hour", ep("    timeout: 61m\n"), "endpoints[0].timeout", 13, "at most 1h0m0s"},
		{"max_in_flight zero", ep("    max_in_flight: 0\n"), "endpoints[0].max_in_flight", 13, "from 1 to 10000"},
		{"max_in_flight unbounded", ep("    max_in_flight: 1000000\n"), "endpoints[0].max_in_flight", 13, "from 1 to 10000"},
		{"rate_limit negative", ep("    rate_limit: -1\n"), "endpoints[0].rate_limit", 13, "0 (unlimited) or more"},
		{"retry override multiplier", ep("    retry: {multiplier: 0.5}\n"), "endpoints[0].retry.multiplier", 13, "at least 1"},
		{"retry override above inherited max", ep("    retry:\n      initial_interval: 2h\n"), "endpoints[0].retry.initial_interval", 14, "must not exceed max_interval (1h0m0s)"},
		{"retry override unknown key", ep("    retry: {max_attempt: 3}\n"), "endpoints[0].retry.max_attempt", 13, "did you mean max_attempts?"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse(t, c.yaml, nil)
			wantError(t, err, c.key, c.line, c.msg)
		})
	}
}

// TestConfigMergeKeys: YAML merge keys share settings between entries;
// the entry's own keys win, and the first merged mapping to set a key wins.
func TestConfigMergeKeys(t *testing.T) {
	cfg := mustParse(t, withSources(`endpoints:
  - &ep
    id: e1
    url: https://a.example.com/
    timeout: 5s
    headers: &hdr {X-Team: billing, X-Env: dev}
  - <<: *ep
    id: e2
    url: https://b.example.com/
    headers:
      <<: *hdr
      X-Env: prod
  - <<: [{timeout: 7s}, *ep]
    id: e3
`), nil)
	e2, e3 := cfg.Endpoints[1], cfg.Endpoints[2]
	if e2.URL != "https://b.example.com/" || e2.Timeout.D() != 5*time.Second ||
		e2.Headers["X-Team"] != "billing" || e2.Headers["X-Env"] != "prod" {
		t.Errorf("merged endpoint %+v", e2)
	}
	if e3.URL != "https://a.example.com/" || e3.Timeout.D() != 7*time.Second {
		t.Errorf("endpoint merging a list: %+v", e3)
	}
	_, err := parse(t, withSources("endpoints:\n  - <<: 5\n    id: e1\n    url: https://a.example.com/\n"), nil)
	wantError(t, err, "endpoints[0]", 10, "a merge key (<<) takes a mapping or a list of mappings")
	_, err = parse(t, withSources("endpoints:\n  - &ep {id: e1, url: \"https://a.example.com/\"}\n  - <<: *ep\n    id: e2\n    urll: x\n"), nil)
	wantError(t, err, "endpoints[1].urll", 13, "unknown key")
}

// TestConfigAliasBomb: aliases let a small file describe a huge tree; the
// decoder's work is bounded and it says why it stopped.
func TestConfigAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString(withSources("endpoints:\n  - &e {id: e0, url: \"https://x.example/\", event_types: ["))
	b.WriteString(strings.Repeat("a, ", 1100) + "a]}\n")
	b.WriteString(strings.Repeat("  - *e\n", 1000))
	wantExpansionLimit(t, b.String())
}

// TestConfigMergeBomb: merge keys through aliases of aliases are bounded
// like other alias expansions, though they decode no value of their own.
func TestConfigMergeBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString(withSources("endpoints:\n  - &l0 {id: e0, url: \"https://x.example/\"}\n"))
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&b, "  - &l%d {<<: [*l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d, *l%[2]d], id: e%[1]d}\n", i, i-1)
	}
	wantExpansionLimit(t, b.String())
}

// wantExpansionLimit checks that parsing yaml stops at the work limit on
// alias expansions, and says so.
func wantExpansionLimit(t *testing.T, yaml string) {
	t.Helper()
	start := time.Now()
	_, err := parse(t, yaml, nil)
	if err == nil || !strings.Contains(err.Error(), "too many alias expansions") {
		t.Fatalf("error = %.300v..., want the work limit", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestConfigTooManyErrors(t *testing.T) {
	_, err := parse(t, base+"sources:\n"+strings.Repeat("  - {}\n", maxErrors), nil)
	errs := configErrors(t, err)
	if len(errs) != maxErrors+1 || errs[maxErrors].Msg != "too many errors; stopping here" {
		t.Errorf("got %d errors, last %q; want %d and a note", len(errs), errs[len(errs)-1].Error(), maxErrors+1)
	}
}

func TestConfigNilLookupMeansNoVariables(t *testing.T) {
	cfg, err := Parse([]byte(base+"storage: {path: \"${DIR:-/var/lib/hookgate}\"}\n"), "x.yaml", nil)
	if err != nil || cfg.Storage.Path != "/var/lib/hookgate" {
		t.Errorf("got %v, %v", cfg, err)
	}
}

func TestDurationAndSizeText(t *testing.T) {
	d := Duration(90 * time.Second)
	b, _ := d.MarshalText()
	var d2 Duration
	if err := d2.UnmarshalText(b); err != nil || d2 != d || string(b) != "1m30s" {
		t.Errorf("duration round trip: %q -> %v, %v", b, d2, err)
	}
	if err := d2.UnmarshalText([]byte("90")); err == nil {
		t.Error("a duration without unit was accepted")
	}
	sz := Size(512 << 10)
	b, _ = sz.MarshalText()
	var sz2 Size
	if err := sz2.UnmarshalText(b); err != nil || sz2 != sz || string(b) != "512KiB" {
		t.Errorf("size round trip: %q -> %v, %v", b, sz2, err)
	}
	if err := sz2.UnmarshalText([]byte("lots")); err == nil {
		t.Error("a bad size was accepted")
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]Size{
		"0": 0, "1048576": 1 << 20, "1MiB": 1 << 20, "512KiB": 512 << 10, "1GiB": 1 << 30,
		"2 MiB": 2 << 20, "1mib": 1 << 20, "10KB": 10_000, "1MB": 1_000_000, "3GB": 3_000_000_000, "7B": 7,
	}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1MiB", "1.5MiB", "1TB", "1 M", "99999999999GiB", "99999999999999999999"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
	for _, s := range []Size{0, 1, 1000, 1 << 10, 1 << 20, 3 << 30, 1<<20 + 1} {
		if got, err := ParseSize(s.String()); err != nil || got != s {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s.String(), got, err, s)
		}
	}
	if got := Size(1 << 20).String(); got != "1MiB" {
		t.Errorf("String() = %q, want 1MiB", got)
	}
}

func TestLoadAndCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte(ep("")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("server:\n  listen: x\nadmin: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// "config OK" on stdout, errors on stderr, where serve writes them:
	// a script that silences stdout still says why a config is refused.
	var out, errs bytes.Buffer
	if code := Check(good, &out, &errs); code != 0 || out.String() != "config OK: 2 sources, 1 endpoints\n" || errs.Len() != 0 {
		t.Errorf("good: exit %d, stdout %q, stderr %q", code, out.String(), errs.String())
	}
	out.Reset()
	code := Check(bad, &out, &errs)
	want := bad + ":2: server.listen: must be host:port, e.g. \":8080\" or \"127.0.0.1:8081\"\n" +
		bad + ":3: admin.tokens: at least one token is required (the admin API is never open)\n"
	if code != 1 || errs.String() != want || out.Len() != 0 {
		t.Errorf("bad: exit %d, stdout %q, stderr\n%s\nwant\n%s", code, out.String(), errs.String(), want)
	}
	errs.Reset()
	if code := Check(filepath.Join(dir, "missing.yaml"), &out, &errs); code != 1 || !strings.Contains(errs.String(), "no such file") {
		t.Errorf("missing: exit %d, stderr %q", code, errs.String())
	}

	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want os.ErrNotExist", err)
	}
	t.Setenv("HOOKGATE_TEST_LISTEN", ":7070")
	if err := os.WriteFile(good, []byte(base+"server: {listen: \"${HOOKGATE_TEST_LISTEN}\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(good)
	if err != nil || cfg.Server.Listen != ":7070" {
		t.Errorf("Load with environment: %v, %+v", err, cfg)
	}
}

// check-config "prints every error with its line" (SPEC section 1), also
// those the YAML parser reports without one: a misspelt alias (`<<:
// *defualts`), a stray control character, a byte that is not UTF-8.
func TestYAMLErrorsHaveTheirLine(t *testing.T) {
	const head = "admin:\n  tokens:\n    - token: operator-token\n"
	for _, c := range []struct {
		name string
		yaml string
		line int
	}{
		{"misspelt alias", head + "x-defaults: &defaults {tenant: acme}\nsources:\n  - <<: *defualts\n    id: s\n    verify: {scheme: none}\n", 6},
		{"control character", head + "sources:\n  - id: \"s\x01\"\n    verify: {scheme: none}\n", 5},
		{"invalid UTF-8", head + "sources:\n  - id: s\xff\n    verify: {scheme: none}\n", 5},
	} {
		_, err := Parse([]byte(c.yaml), "test.yaml", nil)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if errs := configErrors(t, err); len(errs) != 1 || errs[0].Line != c.line {
			t.Errorf("%s: %v; want one error at line %d", c.name, err, c.line)
		}
	}
}

// A tenant has at most maxEndpointsPerTenant endpoints: an event is stored
// with a delivery to each subscriber in one write, and past ~10,000 that
// write does not fit in one Badger transaction, so the event could never
// be accepted (503 to every retry of the provider). Config names the
// endpoint past the bound; another tenant's endpoints do not count.
func TestConfigBoundsEndpointsPerTenant(t *testing.T) {
	defer func(n int) { MaxEndpointsPerTenant = n }(MaxEndpointsPerTenant)
	MaxEndpointsPerTenant = 2
	eps := "endpoints:\n" +
		"  - {id: a1, tenant: acme, url: \"https://a.example.com/\"}\n" +
		"  - {id: g1, tenant: globex, url: \"https://a.example.com/\"}\n" +
		"  - {id: a2, tenant: acme, url: \"https://a.example.com/\"}\n" +
		"  - {id: g2, tenant: globex, url: \"https://a.example.com/\"}\n"
	if _, err := parse(t, withSources(eps), nil); err != nil {
		t.Fatalf("two endpoints for each of two tenants: %v", err)
	}
	_, err := parse(t, withSources(eps+"  - {id: a3, tenant: acme, url: \"https://a.example.com/\"}\n"), nil)
	wantError(t, err, "endpoints[4]", 14, `tenant "acme" has more than 2 endpoints`)
}

// A config.yaml ending with "---" (templating tools write one between
// files), or with empty documents after its own, is one document: it
// was refused as "only one YAML document is allowed". A second document
// that holds anything still is.
func TestConfigTrailingEmptyDocumentsAreIgnored(t *testing.T) {
	const base = "admin:\n  tokens: [{token: operator-token-0123}]\n"
	for _, y := range []string{base + "---\n", base + "---\n# nothing here\n---\n", "---\n" + base + "...\n---\n"} {
		if _, err := Parse([]byte(y), "test.yaml", nil); err != nil {
			t.Errorf("%q: %v; want it accepted", y, err)
		}
	}
	if _, err := Parse([]byte(base+"---\n---\nserver: {}\n"), "test.yaml", nil); err == nil || !strings.Contains(err.Error(), "only one YAML document") {
		t.Errorf("a second document with content after an empty one: %v; want it refused", err)
	}
}
