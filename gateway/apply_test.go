package gateway

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/internal/testsupport"
)

// config.yaml applied again at restarts, over what the store holds.

// A restart with an unchanged config.yaml changes nothing: the endpoint's
// and source's updated_at stay (created_at already does).
func TestConfigApplyUnchangedConfigKeepsUpdatedAt(t *testing.T) {
	extra := "  - {id: keep-src, tenant: acme, verify: {scheme: none}}\nendpoints:\n  - {id: keep, tenant: acme, url: \"http://127.0.0.1:1/x\"}\n"
	g := startGateway(t, gwOptions{extra: extra})
	ep1 := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/keep", acmeToken, nil))
	src1 := must[admin.Source](t, 200)(g.api("GET", "/sources/keep-src", acmeToken, nil))
	g = g.restart(gwOptions{extra: extra})
	ep2 := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/keep", acmeToken, nil))
	src2 := must[admin.Source](t, 200)(g.api("GET", "/sources/keep-src", acmeToken, nil))
	if ep1.CreatedAt != ep2.CreatedAt || src1.CreatedAt != src2.CreatedAt {
		t.Fatalf("created_at changed: %s→%s, %s→%s", ep1.CreatedAt, ep2.CreatedAt, src1.CreatedAt, src2.CreatedAt)
	}
	if ep1.UpdatedAt != ep2.UpdatedAt || src1.UpdatedAt != src2.UpdatedAt {
		t.Errorf("restart with the same config.yaml moved updated_at: endpoint %s → %s, source %s → %s; want unchanged",
			ep1.UpdatedAt, ep2.UpdatedAt, src1.UpdatedAt, src2.UpdatedAt)
	}
}

// An endpoint removed from config.yaml is deleted at start; its pending
// deliveries are cancelled (not sent once the target is up), and the id
// is free again for another tenant's API once that is done.
func TestConfigApplyEndpointRemovedFromConfig(t *testing.T) {
	rcv := newReceiver(t)
	rcv.failAt("gone", true)
	extra := fmt.Sprintf("endpoints:\n  - {id: gone, tenant: acme, url: %q, retry: {initial_interval: 200ms, max_interval: 200ms, max_attempts: 1000}}\n", rcv.url("gone"))
	g := startGateway(t, gwOptions{extra: extra})
	if st, _, b := g.post("open", []byte(`{"id":"rm-1","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "a failed attempt", func() bool { return rcv.countAt("gone") >= 1 })
	ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=gone", acmeToken, nil)).Data
	if len(ds) != 1 {
		t.Fatalf("deliveries: %+v", ds)
	}
	g = g.restart(gwOptions{})
	if st, _, b := g.api("GET", "/endpoints/gone", opToken, nil); st != 404 {
		t.Fatalf("endpoint removed from config: %d %s", st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "its delivery cancelled", func() bool {
		return must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+ds[0].ID, opToken, nil)).State == "cancelled"
	})
	rcv.failAt("gone", false)
	n := rcv.countAt("gone")
	// globex may take the id now, and gets none of acme's deliveries.
	testsupport.WaitFor(t, 10*time.Second, "globex to create gone", func() bool {
		st, _, _ := g.api("POST", "/endpoints", opToken, jsonMap{"id": "gone", "tenant": "globex", "url": rcv.url("gone")})
		return st == 201
	})
	if st, _, b := g.post("other", []byte(`{"x":1}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "globex's delivery", func() bool { return rcv.countAt("gone") == n+1 })
	for _, r := range rcv.at("gone")[n:] {
		if string(r.body) != `{"x":1}` {
			t.Errorf("globex's endpoint got %s", r.body)
		}
	}
}

// Ids are case-sensitive (config accepts "Hooks" and "hooks" as two
// sources): each ingest URL must reach its own source and tenant, and the
// admin API must show each.
func TestConfigApplySourceIDsDifferingInCase(t *testing.T) {
	extra := "  - {id: Hooks, tenant: acme, verify: {scheme: none}}\n  - {id: hooks, tenant: globex, verify: {scheme: none}}\n"
	g := startGateway(t, gwOptions{extra: extra})
	g = g.restart(gwOptions{extra: extra})
	for _, c := range []struct{ src, tenant string }{{"Hooks", "acme"}, {"hooks", "globex"}} {
		st, _, b := g.post(c.src, []byte(`{"x":1}`), nil)
		id, _ := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
		ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+id, opToken, nil))
		if ev.Source != c.src || ev.Tenant != c.tenant {
			t.Errorf("POST /ingest/%s stored an event of source %q tenant %q; want %q %q", c.src, ev.Source, ev.Tenant, c.src, c.tenant)
		}
		src := must[admin.Source](t, 200)(g.api("GET", "/sources/"+c.src, opToken, nil))
		if src.ID != c.src || src.Tenant != c.tenant {
			t.Errorf("GET /sources/%s: %+v", c.src, src)
		}
	}
	if st, _, b := g.api("GET", "/sources/hooks", acmeToken, nil); st != 404 {
		t.Errorf("acme reads globex's source hooks: %d %s", st, b)
	}
}

// Endpoint ids differing only in case are two endpoints, each of its own
// tenant: each gets its tenant's events only, across a restart.
func TestConfigApplyEndpointIDsDifferingInCase(t *testing.T) {
	rcv := newReceiver(t)
	extra := fmt.Sprintf("endpoints:\n  - {id: Billing, tenant: acme, url: %q}\n  - {id: billing, tenant: globex, url: %q}\n", rcv.url("acme"), rcv.url("globex"))
	g := startGateway(t, gwOptions{extra: extra})
	g = g.restart(gwOptions{extra: extra})
	if st, _, b := g.post("open", []byte(`{"id":"c1","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	if st, _, b := g.post("other", []byte(`{"x":2}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "both deliveries", func() bool { return rcv.countAt("acme") == 1 && rcv.countAt("globex") == 1 })
	a := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/Billing", acmeToken, nil))
	if a.Tenant != "acme" {
		t.Fatalf("Billing: %+v", a)
	}
	if st, _, b := g.api("GET", "/endpoints/billing", acmeToken, nil); st != 404 {
		t.Fatalf("acme reads globex's billing: %d %s", st, b)
	}
}

// disabled is a key of the endpoint resource, not of config.yaml: an
// endpoint with disabled: true is a config error naming the key.
func TestConfigApplyConfigDisabledKeyRefused(t *testing.T) {
	_, err := config.Parse([]byte(fmt.Sprintf(testConfig, t.TempDir(), "72h", testSecret,
		"endpoints:\n  - {id: e, tenant: acme, url: \"http://127.0.0.1:1/x\", disabled: true}\n")), "test.yaml", nil)
	if err == nil || !strings.Contains(err.Error(), "disabled") {
		t.Fatalf("config with endpoints[0].disabled: %v; want an error naming the key", err)
	}
}

// A config.yaml endpoint whose url/secret/filters change across a restart
// while a delivery is retrying: the retry goes to the new URL, signed with
// the new secret only.
func TestConfigApplyChangedURLAndSecretApplyToPendingDelivery(t *testing.T) {
	rcv := newReceiver(t)
	rcv.failAt("old", true)
	const s1 = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	const s2 = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	cfg := "endpoints:\n  - {id: mv, tenant: acme, url: %q, secret: %q, retry: {initial_interval: 300ms, max_interval: 300ms, max_attempts: 1000}}\n"
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(cfg, rcv.url("old"), s1)})
	if st, _, b := g.post("open", []byte(`{"id":"mv-1","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "a failed attempt", func() bool { return rcv.countAt("old") >= 1 })
	g = g.restart(gwOptions{extra: fmt.Sprintf(cfg, rcv.url("new"), s2)})
	testsupport.WaitFor(t, 10*time.Second, "the retry at the new URL", func() bool { return rcv.countAt("new") == 1 })
	r := rcv.at("new")[0]
	sigs := strings.Fields(r.header.Get("Webhook-Signature"))
	if len(sigs) != 1 {
		t.Fatalf("signatures after the config secret changed: %q; want one (new secret)", sigs)
	}
	ep := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/mv", acmeToken, nil))
	if ep.Secret != s2 {
		t.Fatalf("secret %q, want %q", ep.Secret, s2)
	}
}

// Ids are global, and a tenant's token chooses its own. An id another
// tenant created through the admin API is not config.yaml's to take: the
// endpoint kept that tenant's signing secret (readable by it, so it could
// forge webhooks the new tenant's receiver trusts), its disabled state and
// its backlog; a source would take that tenant's provider traffic. The
// gateway refuses to start, naming the id, and changes nothing.
func TestConfigRefusesAnotherTenantsAPIIDs(t *testing.T) {
	for _, c := range []struct{ kind, id, create, extra string }{
		{"endpoints", "billing", `{"id":"billing","url":"http://receiver.test/acme"}`,
			"endpoints:\n  - {id: billing, tenant: globex, url: \"http://receiver.test/globex\"}\n"},
		{"sources", "hooks", `{"id":"hooks","verify":{"scheme":"none"}}`,
			"  - {id: hooks, tenant: globex, verify: {scheme: none}}\n"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			g := startGateway(t, gwOptions{})
			if st, _, b := g.api("POST", "/"+c.kind, acmeToken, []byte(c.create)); st != 201 {
				t.Fatalf("create: %d %s", st, b)
			}
			if err := g.Shutdown(); err != nil {
				t.Fatal(err)
			}
			_, err := tryStartGateway(t, gwOptions{dir: g.dir, extra: c.extra})
			id := c.id
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", id)) || !strings.Contains(err.Error(), "another tenant") {
				t.Fatalf("start with config.yaml taking %s %q of another tenant: %v; want a refusal naming it", c.kind, id, err)
			}
			g = startGateway(t, gwOptions{dir: g.dir})
			if st, _, b := g.api("GET", "/"+c.kind+"/"+id, acmeToken, nil); st != 200 {
				t.Fatalf("acme's %s %s after the refused start: %d %s", c.kind, id, st, b)
			}
		})
	}
}

// An endpoint config.yaml moves to another tenant is a new endpoint: a
// new secret (the old tenant could read the old one), enabled, and without
// the old tenant's backlog, which is cancelled rather than sent to it.
func TestConfigMovingAnEndpointToAnotherTenant(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: `endpoints:
  - id: billing
    tenant: acme
    url: "http://127.0.0.1:1/down"
    retry: {initial_interval: 1h, max_interval: 1h, max_attempts: 3, max_elapsed: 3h}
`})
	if st, _, b := g.post("open", []byte(`{"id":"a1","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	var pending admin.Delivery
	testsupport.WaitFor(t, 10*time.Second, "the first attempt to fail", func() bool {
		ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries", acmeToken, nil)).Data
		if len(ds) == 1 && ds[0].AttemptCount == 1 {
			pending = ds[0]
		}
		return pending.ID != ""
	})
	old := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/billing", acmeToken, nil))
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/billing", acmeToken, map[string]any{"disabled": true}))

	g = g.restart(gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: billing, tenant: globex, url: %q, sources: [other]}\n", rcv.url("globex"))})
	ep := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/billing", opToken, nil))
	if ep.Tenant != "globex" || ep.Secret == old.Secret || ep.Disabled || ep.CreatedAt == old.CreatedAt {
		t.Errorf("moved endpoint: tenant %q, same secret %v, disabled %v, created %s (was %s); want a new endpoint of globex",
			ep.Tenant, ep.Secret == old.Secret, ep.Disabled, ep.CreatedAt, old.CreatedAt)
	}
	if d := must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+pending.ID, opToken, nil)); d.State != "cancelled" {
		t.Errorf("acme's delivery to the endpoint before it moved to globex: %s; want cancelled", d.State)
	}
	if st, _, b := g.post("other", []byte(`{"id":"g1","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "globex's delivery", func() bool { return rcv.byPath()["/globex"] == 1 })
	if n := rcv.count(); n != 1 {
		t.Fatalf("the receiver got %d deliveries; want globex's only", n)
	}
}

// config.Parse bounds config.yaml's endpoints per tenant and POST
// /endpoints counts config.yaml's with the API's, but endpoints added to
// config.yaml after the API made others were counted by nobody: the
// tenant could pass the bound, and an event subscribed by all of them be
// too large a write to accept (503 for ever). The start now refuses such a
// config.yaml, naming the tenant and the counts, and changes nothing; an
// entry of config.yaml that names an API endpoint's id replaces it rather
// than adding one.
func TestConfigRefusesTooManyEndpointsWithTheAPIs(t *testing.T) {
	defer func(n int) { config.MaxEndpointsPerTenant = n }(config.MaxEndpointsPerTenant)
	config.MaxEndpointsPerTenant = 3
	g := startGateway(t, gwOptions{})
	for _, id := range []string{"api1", "api2"} {
		if st, _, b := g.api("POST", "/endpoints", acmeToken, []byte(`{"id":"`+id+`","url":"http://receiver.test/`+id+`"}`)); st != 201 {
			t.Fatalf("create %s: %d %s", id, st, b)
		}
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	two := "endpoints:\n  - {id: c1, tenant: acme, url: \"http://receiver.test/c1\"}\n  - {id: c2, tenant: acme, url: \"http://receiver.test/c2\"}\n"
	_, err := tryStartGateway(t, gwOptions{dir: g.dir, extra: two})
	if err == nil || !strings.Contains(err.Error(), `tenant "acme" would have 4 endpoints, 2 from config.yaml and 2 created through the admin API, more than the 3`) {
		t.Fatalf("start with 2 + 2 endpoints for a bound of 3: %v; want a refusal with the counts", err)
	}
	// Another tenant's endpoints do not count, and one config.yaml entry
	// taking an API endpoint's id over (same tenant) is one endpoint.
	ok := "endpoints:\n  - {id: api2, tenant: acme, url: \"http://receiver.test/c1\"}\n  - {id: g1, tenant: globex, url: \"http://receiver.test/g1\"}\n  - {id: g2, tenant: globex, url: \"http://receiver.test/g2\"}\n"
	g = startGateway(t, gwOptions{dir: g.dir, extra: ok})
	eps := must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints", acmeToken, nil)).Data
	if len(eps) != 2 {
		t.Fatalf("acme's endpoints after the refused start and a good one: %d, want api1 and api2", len(eps))
	}
}

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
		ep := must[admin.Endpoint](t, 200)(g.api("POST", "/endpoints/"+id+"/rotate-secret", acmeToken, nil))
		rotated[id] = ep.Secret
	}
	if rotated["fixed"] == configured {
		t.Fatal("the rotation kept the configured secret")
	}
	g = g.restart(gwOptions{extra: extra})
	if s := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/fixed", acmeToken, nil)).Secret; s != configured {
		t.Errorf("endpoint with secret: in config.yaml has %q after a restart, want the configured one", s)
	}
	if s := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/kept", acmeToken, nil)).Secret; s != rotated["kept"] {
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
	ep := must[admin.Endpoint](t, 200)(g.api("POST", "/endpoints/rot/rotate-secret", acmeToken,
		map[string]string{"secret": newSecret, "grace": "24h"}))
	if ep.Secret != newSecret {
		t.Fatalf("rotated secret %q", ep.Secret)
	}

	g = g.restart(gwOptions{extra: cfgWith(newSecret)})
	st, _, body := g.post("open", []byte(`{"id":"e1","type":"t"}`), nil)
	if st != 202 {
		t.Fatalf("ingest: %d %s", st, body)
	}
	testsupport.WaitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() >= 1 })
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
	_, err := config.Parse([]byte(cfg), "bad.yaml", nil)
	if err == nil {
		t.Fatal("the config was accepted")
	}
	path := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if rc := config.Check(path, &stdout, &stderr); rc != 1 {
		t.Fatalf("check-config exit %d, want 1", rc)
	}
	for _, out := range []struct{ what, text string }{{"config.Parse error", err.Error()}, {"check-config stderr", stderr.String()}} {
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
	_, err := config.Parse([]byte(cfg), "bad.yaml", nil)
	if err == nil {
		t.Fatal("the config was accepted")
	}
	if strings.Contains(err.Error(), tok) {
		t.Errorf("the config error quotes the admin token:\n%s", err)
	}
}
