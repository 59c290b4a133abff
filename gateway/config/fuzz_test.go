package config

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParseConfig: for any input, ParseConfig does not panic and returns
// exactly one of a complete *Config or a Errors naming the file.
// (That secrets stay out of errors is TestConfigErrorsNeverShowSecrets: here
// a mutation may expand a secret variable into a non-secret key, where
// quoting the value is allowed.)
func FuzzParseConfig(f *testing.F) {
	spec, err := os.ReadFile("testdata/spec.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(spec), "", base, "- a\n", "a: 1\n---\nb: 2\n", "? [a]\n: b\n",
		ep("    retry: {multiplier: 0.5}\n    headers: {X-A: b}\n"),
		source("    verify: {scheme: hmac, secrets: [\"${SECRET}\"], header: X-Sig, algorithm: sha1}\n"),
		base + "x: &a [*a]\n", base + "server: {listen: \"${PORT:-8080\"}\n", base + "retention: ${R:-1h}\n",
		withSources("endpoints:\n  - &e {id: e, url: \"http://h/\"}\n  - *e\n"),
		withSources("endpoints:\n  - &e {id: e, url: \"http://h/\", headers: &h {X-A: b}}\n  - <<: [*e, {timeout: 1s}]\n    id: f\n    headers: {<<: *h, X-B: c}\n"),
	} {
		f.Add([]byte(seed))
	}
	lookup := env(map[string]string{"SECRET": "s3cret", "HOOKGATE_ADMIN_TOKEN": "admin-token", "STRIPE_WHSEC": "whsec_x", "PORT": "9000"})
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, "fuzz.yaml", lookup)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("cfg=%v err=%v: want exactly one", cfg, err)
		}
		if err != nil {
			checkFuzzError(t, err)
			return
		}
		checkFuzzConfig(t, cfg)
	})
}

func checkFuzzError(t *testing.T, err error) {
	var errs Errors
	if !errors.As(err, &errs) || len(errs) == 0 {
		t.Fatalf("error %T %v, want non-empty Errors", err, err)
	}
	for _, e := range errs {
		if e.File != "fuzz.yaml" || e.Line < 0 {
			t.Fatalf("bad error location: %#v", e)
		}
	}
	if strings.Count(err.Error(), "\n") != len(errs)-1 {
		t.Fatalf("Error() is not one line per error:\n%s", err)
	}
}

func checkFuzzConfig(t *testing.T, cfg *Config) {
	if len(cfg.Admin.Tokens) == 0 {
		t.Fatal("valid config without admin tokens")
	}
	for _, s := range cfg.Sources {
		if s.Verify == nil {
			t.Fatalf("source %q without verify", s.ID)
		}
	}
	for _, e := range cfg.Endpoints {
		if e.Retry == nil || e.Timeout <= 0 || e.MaxInFlight < 1 {
			t.Fatalf("endpoint %q not resolved: %+v", e.ID, e)
		}
	}
}
