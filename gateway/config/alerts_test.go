package config

import (
	"strings"
	"testing"
)

// alerts.url is an endpoint's URL by the same rules, its secret an
// endpoint's secret; a secret without a URL, or an endpoint that takes the
// alert endpoint's id, is refused naming the key and line.
func TestAlertsConfig(t *testing.T) {
	const base = "admin:\n  tokens:\n    - token: operator-token-0123456789\n"
	t.Run("accepted", func(t *testing.T) {
		cfg, err := Parse([]byte(base+"alerts:\n  url: https://ops.example.com/hooks\n"), "test.yaml", env(nil))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Alerts.URL != "https://ops.example.com/hooks" || cfg.Alerts.Secret != "" {
			t.Fatalf("alerts = %+v", cfg.Alerts)
		}
	})
	for _, c := range []struct{ name, yaml, key, msg string }{
		{"bad url", "alerts:\n  url: ftp://ops.example.com/\n", "alerts.url", "http"},
		{"secret without url", "alerts:\n  secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n", "alerts.secret", "needs alerts.url"},
		{"bad secret", "alerts:\n  url: https://ops.example.com/\n  secret: hunter2\n", "alerts.secret", "whsec_"},
		{"reserved id", "endpoints:\n  - id: hookgate-alerts\n    url: https://a.example.com/\n", "endpoints[0].id", "alerts.url"},
		{"reserved source", "sources:\n  - id: hookgate\n    verify: {scheme: none}\n", "sources[0].id", "operational events"},
		{"unknown key", "alerts:\n  urls: https://ops.example.com/\n", "alerts.urls", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(base+c.yaml), "test.yaml", env(nil))
			if err == nil {
				t.Fatal("accepted")
			}
			errs := configErrors(t, err)
			if len(errs) != 1 || !strings.HasPrefix(errs[0].Key, c.key) || !strings.Contains(errs[0].Msg, c.msg) || errs[0].Line < 4 {
				t.Fatalf("got %v, want one error at %s (line 4 or later) saying %q", err, c.key, c.msg)
			}
		})
	}
}
