package gateway

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An endpoint's secret: in config.yaml is applied at every start, so it
// undoes a rotate-secret through the API (README); an endpoint from
// config.yaml without one keeps the secret the gateway generated, rotated
// or not.
func TestConfigSecretAndAPIRotation(t *testing.T) {
	const configured = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	extra := fmt.Sprintf(`endpoints:
  - {id: fixed, tenant: acme, url: "http://receiver.test/f", secret: %q}
  - {id: kept, tenant: acme, url: "http://receiver.test/k"}
`, configured)
	g := startGateway(t, gwOptions{extra: extra})
	rotated := map[string]string{}
	for _, id := range []string{"fixed", "kept"} {
		ep := must[endpointView](t, 200)(g.api("POST", "/endpoints/"+id+"/rotate-secret", acmeToken, nil))
		rotated[id] = ep.Secret
	}
	if rotated["fixed"] == configured {
		t.Fatal("the rotation kept the configured secret")
	}
	g = g.restart(gwOptions{extra: extra})
	if s := must[endpointView](t, 200)(g.api("GET", "/endpoints/fixed", acmeToken, nil)).Secret; s != configured {
		t.Errorf("endpoint with secret: in config.yaml has %q after a restart, want the configured one", s)
	}
	if s := must[endpointView](t, 200)(g.api("GET", "/endpoints/kept", acmeToken, nil)).Secret; s != rotated["kept"] {
		t.Errorf("endpoint without secret: in config.yaml has %q after a restart, want the rotated %q", s, rotated["kept"])
	}
}

// An operator rotates a config.yaml endpoint's secret through the API
// (grace 24h), then writes the new secret into config.yaml so that the next
// start does not undo the rotation (README), and restarts. The old secret
// keeps signing for the rest of its grace period: receivers that have not
// switched yet still verify. The start used to drop it.
func TestRestartWithRotatedSecretInConfigKeepsTheGraceSecret(t *testing.T) {
	const oldSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	const newSecret = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk="
	rcv := newReceiver(t)
	cfgWith := func(secret string) string {
		return fmt.Sprintf(`endpoints:
  - {id: rot, tenant: acme, url: %q, secret: %q, sources: [open]}
`, rcv.url("rot"), secret)
	}
	g := startGateway(t, gwOptions{extra: cfgWith(oldSecret)})
	ep := must[endpointView](t, 200)(g.api("POST", "/endpoints/rot/rotate-secret", acmeToken,
		map[string]string{"secret": newSecret, "grace": "24h"}))
	if ep.Secret != newSecret {
		t.Fatalf("rotated secret %q", ep.Secret)
	}

	g = g.restart(gwOptions{extra: cfgWith(newSecret)})
	st, _, body := g.post("open", []byte(`{"id":"e1","type":"t"}`), nil)
	if st != 202 {
		t.Fatalf("ingest: %d %s", st, body)
	}
	waitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() >= 1 })
	r := rcv.all()[0]
	if !signedWith(t, r, newSecret) {
		t.Fatalf("the delivery does not verify with the new secret: %q", r.header.Get("webhook-signature"))
	}
	if !signedWith(t, r, oldSecret) {
		t.Errorf("within the 24h rotation grace, after a restart whose config.yaml names the new secret, "+
			"the delivery no longer verifies with the old secret (signatures %q): receivers not yet switched reject it",
			r.header.Get("webhook-signature"))
	}
}

// signedWith reports whether one of a delivery's signatures verifies with
// secret, computed with crypto/hmac, independently of the gateway
// (swVerify).
func signedWith(t *testing.T, r recorded, secret string) bool {
	t.Helper()
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("not a Standard Webhooks secret: %.10s…", secret)
	}
	return swVerify(secret, r.header.Get("webhook-id"), r.header.Get("webhook-timestamp"), r.body, r.header.Get("webhook-signature"))
}

// TestConfigErrorsDoNotQuoteASecretAfterAMissingBlank: a flow mapping
// written "key:value" (no blank after the colon, the commonest YAML typo)
// is one key named "key:value" to YAML. The config error that names that
// unknown key must not print the value: here an admin token and an
// endpoint signing secret. check-config prints the
// errors on stderr, which CI logs keep.
func TestConfigErrorsDoNotQuoteASecretAfterAMissingBlank(t *testing.T) {
	const (
		adminTok = "TokSuperSecretAdmin0123456789"
		whsec    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`
admin:
  listen: "127.0.0.1:8081"
  tokens:
    - {token:%s, tenant: ""}
storage: {path: %q}
endpoints:
  - {id: e, url: "https://x.example/", secret:%s}
`, adminTok, filepath.Join(dir, "data"), whsec)
	_, err := ParseConfig([]byte(cfg), "bad.yaml", nil)
	if err == nil {
		t.Fatal("the config was accepted")
	}
	path := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if rc := CheckConfig(path, &stdout, &stderr); rc != 1 {
		t.Fatalf("check-config exit %d, want 1", rc)
	}
	for _, out := range []struct{ what, text string }{{"ParseConfig error", err.Error()}, {"check-config stderr", stderr.String()}} {
		for _, s := range []string{adminTok, whsec, strings.TrimPrefix(whsec, "whsec_")} {
			if strings.Contains(out.text, s) {
				t.Errorf("%s quotes a secret (%.8s…):\n%s", out.what, s, out.text)
			}
		}
	}
}

// TestConfigErrorsDoNotQuoteAnAliasNamedLikeASecret: a literal secret
// written unquoted that starts with '*' is a YAML alias; the parser's
// "unknown anchor 'X' referenced" text, which check-config prints as it is,
// carries the rest of the secret.
func TestConfigErrorsDoNotQuoteAnAliasNamedLikeASecret(t *testing.T) {
	const tok = "Xy9SuperSecretAdminToken0123456789"
	cfg := fmt.Sprintf("admin:\n  tokens:\n    - token: *%s\nstorage: {path: %q}\n", tok, t.TempDir())
	_, err := ParseConfig([]byte(cfg), "bad.yaml", nil)
	if err == nil {
		t.Fatal("the config was accepted")
	}
	if strings.Contains(err.Error(), tok) {
		t.Errorf("the config error quotes the admin token:\n%s", err)
	}
}
