package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// config.yaml applied again at restarts, over what the store holds.

// A restart with an unchanged config.yaml changes nothing: the endpoint's
// and source's updated_at stay (created_at already does).
func TestConfigApplyUnchangedConfigKeepsUpdatedAt(t *testing.T) {
	extra := "  - {id: keep-src, tenant: acme, verify: {scheme: none}}\nendpoints:\n  - {id: keep, tenant: acme, url: \"http://127.0.0.1:1/x\"}\n"
	g := startGateway(t, gwOptions{extra: extra})
	ep1 := must[endpointView](t, 200)(g.api("GET", "/endpoints/keep", acmeToken, nil))
	src1 := must[sourceView](t, 200)(g.api("GET", "/sources/keep-src", acmeToken, nil))
	g = g.restart(gwOptions{extra: extra})
	ep2 := must[endpointView](t, 200)(g.api("GET", "/endpoints/keep", acmeToken, nil))
	src2 := must[sourceView](t, 200)(g.api("GET", "/sources/keep-src", acmeToken, nil))
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
	waitFor(t, 10*time.Second, "a failed attempt", func() bool { return rcv.countAt("gone") >= 1 })
	ds := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?endpoint=gone", acmeToken, nil)).Data
	if len(ds) != 1 {
		t.Fatalf("deliveries: %+v", ds)
	}
	g = g.restart(gwOptions{})
	if st, _, b := g.api("GET", "/endpoints/gone", opToken, nil); st != 404 {
		t.Fatalf("endpoint removed from config: %d %s", st, b)
	}
	waitFor(t, 10*time.Second, "its delivery cancelled", func() bool {
		return must[deliveryView](t, 200)(g.api("GET", "/deliveries/"+ds[0].ID, opToken, nil)).State == "cancelled"
	})
	rcv.failAt("gone", false)
	n := rcv.countAt("gone")
	// globex may take the id now, and gets none of acme's deliveries.
	waitFor(t, 10*time.Second, "globex to create gone", func() bool {
		st, _, _ := g.api("POST", "/endpoints", opToken, jsonMap{"id": "gone", "tenant": "globex", "url": rcv.url("gone")})
		return st == 201
	})
	if st, _, b := g.post("other", []byte(`{"x":1}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	waitFor(t, 10*time.Second, "globex's delivery", func() bool { return rcv.countAt("gone") == n+1 })
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
		ev := must[eventView](t, 200)(g.api("GET", "/events/"+id, opToken, nil))
		if ev.Source != c.src || ev.Tenant != c.tenant {
			t.Errorf("POST /ingest/%s stored an event of source %q tenant %q; want %q %q", c.src, ev.Source, ev.Tenant, c.src, c.tenant)
		}
		src := must[sourceView](t, 200)(g.api("GET", "/sources/"+c.src, opToken, nil))
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
	waitFor(t, 10*time.Second, "both deliveries", func() bool { return rcv.countAt("acme") == 1 && rcv.countAt("globex") == 1 })
	a := must[endpointView](t, 200)(g.api("GET", "/endpoints/Billing", acmeToken, nil))
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
	_, err := ParseConfig([]byte(fmt.Sprintf(testConfig, t.TempDir(), "72h", testSecret,
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
	waitFor(t, 10*time.Second, "a failed attempt", func() bool { return rcv.countAt("old") >= 1 })
	g = g.restart(gwOptions{extra: fmt.Sprintf(cfg, rcv.url("new"), s2)})
	waitFor(t, 10*time.Second, "the retry at the new URL", func() bool { return rcv.countAt("new") == 1 })
	r := rcv.at("new")[0]
	sigs := strings.Fields(r.header.Get("Webhook-Signature"))
	if len(sigs) != 1 {
		t.Fatalf("signatures after the config secret changed: %q; want one (new secret)", sigs)
	}
	ep := must[endpointView](t, 200)(g.api("GET", "/endpoints/mv", acmeToken, nil))
	if ep.Secret != s2 {
		t.Fatalf("secret %q, want %q", ep.Secret, s2)
	}
}
