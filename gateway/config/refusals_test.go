package config

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTokenTenantFromUnsetVariableIsRefused: a tenant-scoped admin token whose
// tenant comes from the environment becomes an operator token (all tenants)
// when the variable is not set: ${ACME_TENANT} expands to "", and "" is the
// operator. The gateway starts with a privilege it was not given (fail open);
// like every other field an unset variable empties, it must be an error
// naming the key, the line and the variable.
func TestTokenTenantFromUnsetVariableIsRefused(t *testing.T) {
	y := "admin:\n  tokens:\n    - token: operator-token-0123456789\n    - token: acme-token-0123456789\n      tenant: ${ACME_TENANT}\n"
	cfg, err := Parse([]byte(y), "test.yaml", env(nil))
	if err == nil {
		t.Fatalf("config accepted: admin.tokens[1] (meant for one tenant) is now scoped to %q, i.e. the operator: %+v",
			cfg.Admin.Tokens[1].Tenant, cfg.Admin.Tokens)
	}
	errs := configErrors(t, err)
	if len(errs) != 1 || errs[0].Key != "admin.tokens[1].tenant" || errs[0].Line != 5 || !strings.Contains(errs[0].Msg, "ACME_TENANT") {
		t.Fatalf("got %v, want one error at admin.tokens[1].tenant, line 5, naming ACME_TENANT", err)
	}
}

// TestPartlyUnsetSecretIsRefused: a secret that only partly comes from an unset
// variable ("prefix-${VAR}") expands to its constant part and is accepted,
// so the gateway starts guarded by a secret written in the file: an admin
// token "hg_" and a Stripe signing secret "whsec_" anyone can read in the
// repository. An unset reference only counts as an error when the whole
// value ends up empty.
func TestPartlyUnsetSecretIsRefused(t *testing.T) {
	y := "admin:\n  tokens:\n    - token: hg_${ADMIN_TOKEN}\n" +
		"sources:\n  - id: stripe\n    verify:\n      scheme: stripe\n      secrets: [\"whsec_${STRIPE_KEY}\"]\n"
	cfg, err := Parse([]byte(y), "test.yaml", env(nil))
	if err == nil {
		t.Fatalf("config accepted with unset ADMIN_TOKEN and STRIPE_KEY: admin token %q, stripe secret %q",
			cfg.Admin.Tokens[0].Token, cfg.Sources[0].Verify.Secrets[0])
	}
	msg := err.Error()
	for _, want := range []string{"admin.tokens[0].token", "ADMIN_TOKEN", "sources[0] (id stripe).verify.secrets[0]", "STRIPE_KEY"} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors do not mention %s:\n%s", want, msg)
		}
	}
}

// check-config passed a config that serve refused: the trial token on a
// non-loopback admin listener was checked only at start, with no line.
// It is a config error now, so check-config refuses it too, naming the
// key and line.
func TestCheckConfigRefusesWhatServeRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "exposed.yaml")
	y := fmt.Sprintf("server: {listen: \"127.0.0.1:0\"}\nadmin:\n  listen: \"0.0.0.0:0\"\n  tokens: [{token: %s}]\nstorage: {path: %q}\n", DevAdminToken, filepath.Join(dir, "data"))
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := Check(path, io.Discard, &out); code != 1 || !strings.Contains(out.String(), "exposed.yaml:4: admin.tokens[0].token: the trial token") {
		t.Fatalf("check-config: exit %d, %q", code, out.String())
	}
}

// A short admin token guards only a loopback admin listener: on one
// reachable from other hosts it is a config error naming the key and line
// (and its length, never the token), as the trial token is; 16 bytes pass.
func TestShortAdminTokenIsRefusedOnAnExposedListener(t *testing.T) {
	cfg := func(listen, token string) string {
		return fmt.Sprintf("server: {listen: \"127.0.0.1:0\"}\nadmin:\n  listen: %q\n  tokens: [{token: %s}]\n", listen, token)
	}
	for _, c := range []struct {
		listen, token, want string
	}{
		{"0.0.0.0:8081", "s3cr3t", "test.yaml:4: admin.tokens[0].token: a token of 6 bytes is refused on a non-loopback admin.listen: at least 16 are required"},
		{":8081", "0123456789abcde", "test.yaml:4: admin.tokens[0].token: a token of 15 bytes is refused"},
		{"[::]:8081", "0123456789abcde", "a token of 15 bytes is refused"},
		{":8081", "0123456789abcdef", ""},
		{"127.0.0.1:8081", "s3cr3t", ""},
		{"[::1]:8081", "s3cr3t", ""},
		{"localhost:8081", "s3cr3t", ""},
	} {
		_, err := Parse([]byte(cfg(c.listen, c.token)), "test.yaml", nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("listen %s, token of %d bytes: %v; want it accepted", c.listen, len(c.token), err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("listen %s, token of %d bytes: %v; want %q", c.listen, len(c.token), err, c.want)
		case err != nil && strings.Contains(err.Error(), c.token):
			t.Errorf("the error quotes the token: %v", err)
		}
	}
	// The last line of defence, for a Config built without Parse.
	c := &Config{Admin: AdminConfig{Listen: ":8081", Tokens: []TokenConfig{{Token: "short"}}}}
	if err := CheckAdminExposure(c); err == nil || strings.Contains(err.Error(), "short") {
		t.Errorf("CheckAdminExposure: %v; want a refusal that does not quote the token", err)
	}
}

// An admin token whose tenant is left blank (tenant:, ~ or null: what
// envsubst or Helm render for a missing value) fails closed: it kept the
// default "", the operator of every tenant, as an empty ${VAR} never
// does. tenant: "" (or no key) still names the operator.
func TestConfigBlankTokenTenantIsNotTheOperator(t *testing.T) {
	for _, blank := range []string{"", " ~", " null"} {
		y := "admin:\n  tokens:\n    - token: operator-token-0123456789\n    - token: acme-token-0123456789\n      tenant:" + blank + "\n"
		cfg, err := Parse([]byte(y), "yaml", nil)
		if err == nil {
			t.Errorf("tenant:%s accepted: admin.tokens[1] is scoped to %q, the operator (all tenants)", blank, cfg.Admin.Tokens[1].Tenant)
			continue
		}
		if errs := configErrors(t, err); len(errs) != 1 || errs[0].Key != "admin.tokens[1].tenant" || errs[0].Line != 5 {
			t.Errorf("tenant:%s: %v; want one error at admin.tokens[1].tenant, line 5", blank, err)
		}
	}
	y := "admin:\n  tokens:\n    - token: operator-token-0123456789\n      tenant: \"\"\n"
	if cfg, err := Parse([]byte(y), "yaml", nil); err != nil || cfg.Admin.Tokens[0].Tenant != "" {
		t.Errorf(`tenant: "": %v; want the operator`, err)
	}
}

// A config path that names something huge or endless (/dev/zero, a log
// file) is refused after 16 MiB instead of reading on until memory runs
// out.
func TestConfigFileIsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.yaml")
	if err := os.WriteFile(path, bytes.Repeat([]byte("# padding\n"), (MaxFileSize/10)+1), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), "larger than 16MiB") {
		t.Fatalf("a %d-byte config: %v, want refused as larger than 16MiB", MaxFileSize+10, err)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		if _, err := Load("/dev/zero"); err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Fatalf("/dev/zero: %v, want refused as too large", err)
		}
	}
}
