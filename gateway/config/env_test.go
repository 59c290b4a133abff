package config

import (
	"strings"
	"testing"
)

// TestTokenTenantFromEmptyVariableIsRefused: "a token's tenant: ${T}
// never becomes the operator" and "token: hg_${TOKEN} never becomes the
// guessable hg_" (README) held only when the variable was unset. docker
// compose (`T: ${T}` with T unset on the host), a Kubernetes `value: ""`
// or systemd's `Environment=T=` set it to "": the tenant token became an
// operator token, the admin token "hg_", a Stripe secret the public
// "whsec_". A reference without a default that expands to nothing fails
// closed, as an unset one does; whoever wants an empty value writes ${T:-}.
func TestTokenTenantFromEmptyVariableIsRefused(t *testing.T) {
	y := "admin:\n  tokens:\n    - token: operator-token-0123456789\n" +
		"    - token: acme-token-0123456789\n      tenant: ${ACME_TENANT}\n" +
		"    - token: hg_${ADMIN_TOKEN}\n" +
		"sources:\n  - id: stripe\n    verify:\n      scheme: stripe\n      secrets: [\"whsec_${STRIPE_KEY}\"]\n"
	vars := map[string]string{"ACME_TENANT": "", "ADMIN_TOKEN": "", "STRIPE_KEY": ""}
	cfg, err := Parse([]byte(y), "test.yaml", env(vars))
	if err == nil {
		t.Fatalf("config accepted with ACME_TENANT, ADMIN_TOKEN and STRIPE_KEY set to \"\": "+
			"admin.tokens[1] (meant for one tenant) is scoped to %q, i.e. the operator; admin.tokens[2] is %q; "+
			"the stripe secret is %q",
			cfg.Admin.Tokens[1].Tenant, cfg.Admin.Tokens[2].Token, cfg.Sources[0].Verify.Secrets[0])
	}
	msg := err.Error()
	for _, want := range []string{
		"test.yaml:5: admin.tokens[1].tenant", "ACME_TENANT",
		"test.yaml:6: admin.tokens[2].token", "ADMIN_TOKEN",
		"sources[0] (id stripe).verify.secrets[0]", "STRIPE_KEY",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors do not mention %s:\n%s", want, msg)
		}
	}
}

// TestNestedDefaultIsNotTakenLiterally: "${ADMIN_TOKEN:-${FALLBACK_TOKEN}}"
// is how the shell and docker compose write "this variable, else that
// one". The reference ended at the first "}" and its default was taken
// literally: with ADMIN_TOKEN unset the admin token was the text
// "${FALLBACK_TOKEN}", which anyone reading the file knows. Such a value
// is a config error naming key and line.
func TestNestedDefaultIsNotTakenLiterally(t *testing.T) {
	y := "admin:\n  tokens:\n    - token: ${ADMIN_TOKEN:-${FALLBACK_TOKEN}}\n" +
		"sources:\n  - id: s\n    verify:\n      scheme: hmac\n      header: X-Sig\n" +
		"      secrets: [\"${SIG_SECRET:-${SHARED_SECRET}}\"]\n"
	vars := map[string]string{"FALLBACK_TOKEN": "fallback-token-0123456789", "SHARED_SECRET": "shared-secret-0123456789"}
	cfg, err := Parse([]byte(y), "test.yaml", env(vars))
	if err == nil {
		t.Fatalf("accepted: admin token %q, hmac secret %q", cfg.Admin.Tokens[0].Token, cfg.Sources[0].Verify.Secrets[0])
	}
	msg := err.Error()
	for _, want := range []string{"test.yaml:3: admin.tokens[0].token", "sources[0] (id s).verify.secrets[0]", "cannot hold another ${…} reference"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refused, but the errors do not name %s:\n%s", want, msg)
		}
	}
}
