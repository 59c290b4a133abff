package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
)

// slowRetry keeps a delivery retrying (well under the circuit's 5
// consecutive failures within a test's patience) for a while.
const slowRetry = `{initial_interval: 300ms, max_interval: 300ms, multiplier: 1, randomization: 0, max_attempts: 50, max_elapsed: 1m}`

// A delivery that is retrying when its endpoint's url and headers are
// PATCHed goes to the new url with the new headers on its next attempt,
// keeping its Idempotency-Key and its attempt count.
func TestManagePatchURLAndHeadersApplyToRetryingDelivery(t *testing.T) {
	rcv := newReceiver(t)
	rcv.failing.Store(true)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q, headers: {X-Old: o}, retry: %s}\n", rcv.url("a"), slowRetry)})
	g.post("open", []byte(`{"id":"p-1","type":"t"}`), nil)
	testsupport.WaitFor(t, 10*time.Second, "a failed first attempt", func() bool { return rcv.countAt("a") >= 1 })
	rcv.failing.Store(false)
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/ep", acmeToken, jsonMap{"url": rcv.url("b"), "headers": map[string]string{"X-New": "n"}}))
	testsupport.WaitFor(t, 10*time.Second, "the retry at the new url", func() bool { return rcv.countAt("b") >= 1 })
	var first, got recorded
	for _, q := range rcv.all() {
		if q.path == "/a" && first.path == "" {
			first = q
		}
		if q.path == "/b" {
			got = q
			break
		}
	}
	if got.header.Get("X-New") != "n" || got.header.Get("X-Old") != "" {
		t.Fatalf("headers of the retry: X-New %q X-Old %q", got.header.Get("X-New"), got.header.Get("X-Old"))
	}
	if got.header.Get("Idempotency-Key") != first.header.Get("Idempotency-Key") || got.header.Get("hookgate-attempt") == "1" {
		t.Fatalf("retry key %q attempt %q, first key %q", got.header.Get("Idempotency-Key"), got.header.Get("hookgate-attempt"), first.header.Get("Idempotency-Key"))
	}
}

// A delivery retrying when the secret is rotated: its next attempt carries
// both signatures (the old and the new secret verify it); rotating twice in
// a row leaves every secret of the grace signing, and the API shows only
// the newest.
func TestManageRotateTwiceWhileRetrying(t *testing.T) {
	rcv := newReceiver(t)
	rcv.failing.Store(true)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q, retry: %s}\n", rcv.url("a"), slowRetry)})
	s0 := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/ep", acmeToken, nil)).Secret
	g.post("open", []byte(`{"id":"r-1","type":"t"}`), nil)
	testsupport.WaitFor(t, 10*time.Second, "a failed first attempt", func() bool { return rcv.countAt("a") >= 1 })
	s1 := must[admin.Endpoint](t, 200)(g.api("POST", "/endpoints/ep/rotate-secret", acmeToken, nil)).Secret
	s2 := must[admin.Endpoint](t, 200)(g.api("POST", "/endpoints/ep/rotate-secret", acmeToken, nil)).Secret
	n := rcv.countAt("a")
	rcv.failing.Store(false)
	testsupport.WaitFor(t, 10*time.Second, "the retry after the rotations", func() bool { return rcv.countAt("a") > n })
	got := rcv.all()[n]
	if k := len(strings.Fields(got.header.Get("webhook-signature"))); k != 3 {
		t.Fatalf("%d signatures after two rotations in the grace, want 3: %q", k, got.header.Get("webhook-signature"))
	}
	for _, s := range []string{s0, s1, s2} {
		verifySW(t, s, got.body, got.header)
	}
	list := must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints", acmeToken, nil))
	for _, ep := range list.Data {
		if ep.ID == "ep" && ep.Secret != s2 {
			t.Fatalf("list shows secret %q, want the newest", ep.Secret)
		}
	}
	if v := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/ep", acmeToken, nil)); v.Secret != s2 {
		t.Fatalf("get shows %q, want the newest", v.Secret)
	}
}

// After a short grace, only the new secret signs, also for a delivery that
// was created (and failed) before the rotation.
func TestManageRotateGraceEnds(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	rcv.failing.Store(true)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q, retry: {initial_interval: 1500ms, max_interval: 1500ms, multiplier: 1, randomization: 0, max_attempts: 50, max_elapsed: 1m}}\n", rcv.url("a"))})
	g.post("open", []byte(`{"id":"g-1","type":"t"}`), nil)
	testsupport.WaitFor(t, 10*time.Second, "a failed first attempt", func() bool { return rcv.countAt("a") >= 1 })
	s1 := must[admin.Endpoint](t, 200)(g.api("POST", "/endpoints/ep/rotate-secret", acmeToken, jsonMap{"grace": "500ms"})).Secret
	rcv.failing.Store(false)
	start := time.Now()
	testsupport.WaitFor(t, 10*time.Second, "the retry", func() bool { return rcv.countAt("a") >= 2 })
	got := rcv.all()[1]
	if time.Since(start) < 500*time.Millisecond {
		t.Skip("the retry came inside the grace")
	}
	if sig := got.header.Get("webhook-signature"); len(strings.Fields(sig)) != 1 {
		t.Fatalf("signatures after the grace: %q", sig)
	}
	verifySW(t, s1, got.body, got.header)
}

// A PATCH of timeout applies to the next attempt of a retrying delivery.
func TestManagePatchTimeoutAppliesToRetry(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	rcv.delay.Store(int64(400 * time.Millisecond))
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q, timeout: 100ms, retry: %s}\n", rcv.url("a"), slowRetry)})
	st, _, b := g.post("open", []byte(`{"id":"t-1","type":"t"}`), nil)
	evID := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "a timed-out attempt", func() bool { return rcv.countAt("a") >= 1 })
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/ep", acmeToken, jsonMap{"timeout": "2s"}))
	testsupport.WaitFor(t, 10*time.Second, "the delivery to succeed", func() bool {
		ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+evID, acmeToken, nil))
		return ev.Deliveries != nil && len(*ev.Deliveries) == 1 && (*ev.Deliveries)[0].State == "succeeded"
	})
}

// Rotation of a source's verify secrets through PATCH: the old secret
// stops verifying at once (README: several secrets = rotation, so keeping
// both is the way to a grace), and the new one verifies.
func TestManageSourceSecretPatch(t *testing.T) {
	g := startGateway(t, gwOptions{})
	newSecret := "whsec_" + strings.Repeat("QUJDRA", 6) + "QUJD"
	must[admin.Source](t, 200)(g.api("PATCH", "/sources/sw", acmeToken, jsonMap{"verify": jsonMap{"secrets": []string{newSecret}}}))
	body := []byte(`{"type":"x"}`)
	if st, _, b := g.post("sw", body, signSW("msg-old", time.Now(), body)); st != 401 {
		t.Fatalf("old secret after the PATCH: %d %s", st, b)
	}
}

// An endpoint created through the API and disabled through it stays
// disabled, with its settings, across a restart; a config.yaml endpoint
// PATCHed through the API gets its config.yaml settings back (README: the
// config entries win), but keeps its disabled flag.
func TestManageRestartAPIvsConfig(t *testing.T) {
	rcv := newReceiver(t)
	extra := fmt.Sprintf("endpoints:\n  - {id: cfg, tenant: acme, url: %q}\n", rcv.url("cfg"))
	g := startGateway(t, gwOptions{extra: extra})
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "api", "url": rcv.url("api"), "headers": map[string]string{"X-A": "1"}}))
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/api", acmeToken, jsonMap{"disabled": true}))
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/cfg", acmeToken, jsonMap{"url": rcv.url("moved"), "disabled": true}))
	g = g.restart(gwOptions{extra: extra})
	api := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/api", acmeToken, nil))
	if !api.Disabled || api.Headers["X-A"] != "1" || api.FromConfig {
		t.Fatalf("api endpoint after restart: %+v", api)
	}
	cfg := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/cfg", acmeToken, nil))
	if cfg.URL != rcv.url("cfg") || !cfg.Disabled {
		t.Fatalf("config endpoint after restart: %+v", cfg)
	}
}

// A source deleted and created again with the same id in the same tenant:
// ingest is 404 in between, its events stay readable, and an event id the
// first one saw is still deduplicated.
func TestManageSourceRecreateDedupe(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := []byte(`{"id":"d-1","type":"t"}`)
	st, _, first := g.post("open", body, nil)
	evID := must[jsonMap](t, 202)(st, nil, first)["id"].(string)
	if st, _, _ := g.api("DELETE", "/sources/open", acmeToken, nil); st != 204 {
		t.Fatalf("delete %d", st)
	}
	if st, _, _ := g.post("open", body, nil); st != 404 {
		t.Fatalf("ingest after delete %d", st)
	}
	must[admin.Event](t, 200)(g.api("GET", "/events/"+evID, acmeToken, nil))
	must[admin.Source](t, 201)(g.api("POST", "/sources", acmeToken, jsonMap{"id": "open", "verify": jsonMap{"scheme": "none"}, "event_id": "json:/id"}))
	// The dedupe scope is (tenant, source id): the recreated source still
	// knows the event id, and answers with the first answer.
	if st, hdr, again := g.post("open", body, nil); st != 202 || hdr.Get(inbound.HeaderReplayed) != "true" || string(again) != string(first) {
		t.Fatalf("after recreate: %d replayed=%q %s", st, hdr.Get(inbound.HeaderReplayed), again)
	}
	// PATCH of event_id affects later requests only.
	must[admin.Source](t, 200)(g.api("PATCH", "/sources/open", acmeToken, jsonMap{"event_id": "json:/type"}))
	st, _, b := g.post("open", []byte(`{"id":"d-2","type":"k"}`), nil)
	if v := must[jsonMap](t, 202)(st, nil, b); v["event_id"] != "k" {
		t.Fatalf("event id after PATCH: %v", v)
	}
	if ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+evID, acmeToken, nil)); ev.EventID != "d-1" {
		t.Fatalf("old event changed: %+v", ev)
	}
}
