package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

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
	var pending deliveryView
	waitFor(t, 10*time.Second, "the first attempt to fail", func() bool {
		ds := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries", acmeToken, nil)).Data
		if len(ds) == 1 && ds[0].AttemptCount == 1 {
			pending = ds[0]
		}
		return pending.ID != ""
	})
	old := must[endpointView](t, 200)(g.api("GET", "/endpoints/billing", acmeToken, nil))
	must[endpointView](t, 200)(g.api("PATCH", "/endpoints/billing", acmeToken, map[string]any{"disabled": true}))

	g = g.restart(gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: billing, tenant: globex, url: %q, sources: [other]}\n", rcv.url("globex"))})
	ep := must[endpointView](t, 200)(g.api("GET", "/endpoints/billing", opToken, nil))
	if ep.Tenant != "globex" || ep.Secret == old.Secret || ep.Disabled || ep.CreatedAt == old.CreatedAt {
		t.Errorf("moved endpoint: tenant %q, same secret %v, disabled %v, created %s (was %s); want a new endpoint of globex",
			ep.Tenant, ep.Secret == old.Secret, ep.Disabled, ep.CreatedAt, old.CreatedAt)
	}
	if d := must[deliveryView](t, 200)(g.api("GET", "/deliveries/"+pending.ID, opToken, nil)); d.State != "cancelled" {
		t.Errorf("acme's delivery to the endpoint before it moved to globex: %s; want cancelled", d.State)
	}
	if st, _, b := g.post("other", []byte(`{"id":"g1","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	waitFor(t, 10*time.Second, "globex's delivery", func() bool { return rcv.byPath()["/globex"] == 1 })
	if n := rcv.count(); n != 1 {
		t.Fatalf("the receiver got %d deliveries; want globex's only", n)
	}
}

// ParseConfig bounds config.yaml's endpoints per tenant and POST
// /endpoints counts config.yaml's with the API's, but endpoints added to
// config.yaml after the API made others were counted by nobody: the
// tenant could pass the bound, and an event subscribed by all of them be
// too large a write to accept (503 for ever). The start now refuses such a
// config.yaml, naming the tenant and the counts, and changes nothing; an
// entry of config.yaml that names an API endpoint's id replaces it rather
// than adding one.
func TestConfigRefusesTooManyEndpointsWithTheAPIs(t *testing.T) {
	defer func(n int) { maxEndpointsPerTenant = n }(maxEndpointsPerTenant)
	maxEndpointsPerTenant = 3
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
	eps := must[apiList[endpointView]](t, 200)(g.api("GET", "/endpoints", acmeToken, nil)).Data
	if len(eps) != 2 {
		t.Fatalf("acme's endpoints after the refused start and a good one: %d, want api1 and api2", len(eps))
	}
}
