package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
	"hookgate/outbound"
	"hookgate/storage"
)

// Security: the admin API lets nobody in without the exact token, a
// tenant never reaches another tenant's resources, secrets never show up
// in logs or error answers, endpoints cannot reach private addresses, and
// signed requests cannot be replayed after their tolerance.

// flipByte returns s with the byte at i changed.
func flipByte(s string, i int) string {
	b := []byte(s)
	b[i] ^= 0x01
	return string(b)
}

// adminRoutes is every /api/v1 route with a token, with a body where the
// route needs one. IDs are of resources that exist in the session.
func adminRoutes(evt, dlv, rpl string) []struct {
	method, path string
	body         any
} {
	return []struct {
		method, path string
		body         any
	}{
		{"GET", "/events", nil},
		{"POST", "/events", jsonMap{"source": "open", "payload": jsonMap{"id": "by-intruder"}}},
		{"GET", "/events/" + evt, nil},
		{"POST", "/events/" + evt + "/replay", nil},
		{"GET", "/deliveries", nil},
		{"GET", "/deliveries/" + dlv, nil},
		{"POST", "/deliveries/" + dlv + "/retry", nil},
		{"GET", "/endpoints", nil},
		{"POST", "/endpoints", jsonMap{"id": "intruder", "tenant": "acme", "url": "http://intruder.test/"}},
		{"GET", "/endpoints/ep", nil},
		{"PATCH", "/endpoints/ep", jsonMap{"url": "http://intruder.test/"}},
		{"DELETE", "/endpoints/ep", nil},
		{"POST", "/endpoints/ep/rotate-secret", nil},
		{"GET", "/sources", nil},
		{"POST", "/sources", jsonMap{"id": "intruder", "tenant": "acme", "verify": jsonMap{"scheme": "none"}}},
		{"GET", "/sources/open", nil},
		{"PATCH", "/sources/open", jsonMap{"event_id": "json:/x"}},
		{"DELETE", "/sources/open", nil},
		{"POST", "/replays", jsonMap{"source": "open"}},
		{"GET", "/replays/" + rpl, nil},
	}
}

// TestSecurityAdminTokens: every admin route refuses a request without a
// token, with a wrong one, or with one that differs from a real token in a
// single byte (first, middle, last), in case, or in length by one, or that
// comes anywhere but the Authorization header: 401, with WWW-Authenticate,
// and nothing changed.
func TestSecurityAdminTokens(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q}\n", rcv.url("ep"))})
	st, _, b := g.post("open", []byte(`{"id":"e1"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() == 1 })
	dlv := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries", opToken, nil)).Data[0].ID
	rpl := must[admin.Replay](t, 202)(g.api("POST", "/replays", opToken, jsonMap{"source": "open", "status": "cancelled"})).ID
	before := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/ep", opToken, nil))

	var bad []string
	for _, tok := range []string{opToken, acmeToken} {
		bad = append(bad, flipByte(tok, 0), flipByte(tok, len(tok)/2), flipByte(tok, len(tok)-1),
			strings.ToUpper(tok), tok[:len(tok)-1], tok+"x", "x"+tok)
	}
	bad = append(bad, "", "nope", strings.Repeat("a", 2048))
	for _, r := range adminRoutes(evt, dlv, rpl) {
		for _, tok := range bad {
			st, hdr, b := g.api(r.method, r.path, tok, r.body)
			if st != 401 || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("%s %s with token %q: %d %s; want 401", r.method, r.path, tok, st, b)
			}
			if tok != "" && strings.Contains(string(b), tok) {
				t.Fatalf("%s %s: the 401 echoes the presented token: %s", r.method, r.path, b)
			}
		}
		// A real token anywhere but the Authorization header is no token.
		for _, where := range []struct{ query, header, value string }{
			{query: "?access_token=" + opToken},
			{query: "?token=" + opToken},
			{header: "Cookie", value: "token=" + opToken},
			{header: "X-Api-Key", value: opToken},
			{header: "Authorization", value: opToken},
			{header: "Authorization", value: "Basic " + opToken},
			{header: "Authorization", value: "Bearer" + opToken},
		} {
			path := r.path
			if strings.Contains(path, "?") {
				path += strings.Replace(where.query, "?", "&", 1)
			} else {
				path += where.query
			}
			var hdr []string
			if where.header != "" {
				hdr = []string{where.header, where.value}
			}
			if st, _, b := g.api(r.method, path, "", r.body, hdr...); st != 401 {
				t.Fatalf("%s %s with the token in %+v: %d %s; want 401", r.method, path, where, st, b)
			}
		}
	}
	after := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/ep", opToken, nil))
	if after.URL != before.URL || after.Secret != before.Secret {
		t.Fatalf("the endpoint changed: %+v -> %+v", before, after)
	}
	must[admin.Source](t, 200)(g.api("GET", "/sources/open", opToken, nil))
	wantProblem(t, "intruder endpoint", 404, "")(g.api("GET", "/endpoints/intruder", opToken, nil))
	wantProblem(t, "intruder source", 404, "")(g.api("GET", "/sources/intruder", opToken, nil))
	if evs := eventsIn(t, g.Store()); len(evs) != 1 {
		t.Fatalf("%d events, want only the ingested one", len(evs))
	}
	if d := must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+dlv, opToken, nil)); d.AttemptCount != 1 || rcv.count() != 1 {
		t.Fatalf("delivery %+v after %d requests: a refused retry or replay ran", d, rcv.count())
	}
}

// TestSecurityTenantIsolationGaps fills what TestAdminTenantIsolation does
// not cover: a foreign id and an id that never existed answer with the
// same bytes on every route; an Idempotency-Key is scoped to the token's
// tenant, so a tenant can never get another tenant's stored answer (which
// may carry a secret) by reusing its key; a replay cannot send an event to
// another tenant's endpoint, even for the operator.
func TestSecurityTenantIsolationGaps(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: acme-ep, tenant: acme, url: %q}
  - {id: globex-ep, tenant: globex, url: %q}
`, rcv.url("acme"), rcv.url("globex"))})
	st, _, b := g.post("other", []byte(`{"id":"g1"}`), nil)
	gEvt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	st, _, b = g.post("open", []byte(`{"id":"a1"}`), nil)
	aEvt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "both deliveries", func() bool { return rcv.count() == 2 })
	gDlv := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+gEvt, opToken, nil)).Data[0].ID
	gRpl := must[admin.Replay](t, 202)(g.api("POST", "/replays", opToken, jsonMap{"source": "other", "status": "cancelled"})).ID

	now := time.Now()
	missing := map[string]string{
		gEvt: storage.NewID("evt_", now), gDlv: storage.NewID("dlv_", now), gRpl: storage.NewID("rpl_", now),
		"globex-ep": "no-such-ep", "other": "no-such-src",
	}
	for _, r := range []struct{ method, path, id string }{
		{"GET", "/events/%s", gEvt}, {"POST", "/events/%s/replay", gEvt},
		{"GET", "/deliveries/%s", gDlv}, {"POST", "/deliveries/%s/retry", gDlv},
		{"GET", "/replays/%s", gRpl},
		{"GET", "/endpoints/%s", "globex-ep"}, {"DELETE", "/endpoints/%s", "globex-ep"},
		{"POST", "/endpoints/%s/rotate-secret", "globex-ep"},
		{"GET", "/sources/%s", "other"}, {"DELETE", "/sources/%s", "other"},
	} {
		fst, fhdr, foreign := g.api(r.method, fmt.Sprintf(r.path, r.id), acmeToken, nil)
		mst, _, none := g.api(r.method, fmt.Sprintf(r.path, missing[r.id]), acmeToken, nil)
		if fst != 404 || mst != 404 || !bytes.Equal(foreign, none) {
			t.Fatalf("%s %s: foreign %d %s, never existed %d %s; want the same 404", r.method, r.path, fst, foreign, mst, none)
		}
		decodeProblem(t, fhdr, foreign)
	}

	// Idempotency keys are per tenant: the operator's stored answer (with
	// the secret of a globex endpoint) is never replayed to acme, and a key
	// the operator used is free for acme.
	gx := jsonMap{"id": "gx2", "tenant": "globex", "url": rcv.url("gx2")}
	created := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken, gx, "Idempotency-Key", "k-gx"))
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, gx, "Idempotency-Key", "k-gx")
	if st == 201 || hdr.Get(inbound.HeaderReplayed) != "" || strings.Contains(string(b), created.Secret) {
		t.Fatalf("acme reusing the operator's key and request: %d replayed=%q %s", st, hdr.Get(inbound.HeaderReplayed), b)
	}
	wantProblem(t, "acme creating in globex", 422, "tenant")(st, hdr, b)
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{"id": "op-x", "tenant": "globex", "url": rcv.url("x")}, "Idempotency-Key", "k-own"))
	st, hdr, b = g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "ac2", "url": rcv.url("ac2")}, "Idempotency-Key", "k-own")
	if st != 201 || hdr.Get(inbound.HeaderReplayed) != "" {
		t.Fatalf("acme's own request with a key the operator used: %d replayed=%q %s; want it executed", st, hdr.Get(inbound.HeaderReplayed), b)
	}

	// A replay never crosses tenants, whoever asks; a foreign endpoint
	// reads like one that does not exist.
	foreign := wantProblem(t, "acme event to globex endpoint", 422, "endpoints[0]")(
		g.api("POST", "/events/"+aEvt+"/replay", acmeToken, jsonMap{"endpoints": []string{"globex-ep"}}))
	none := wantProblem(t, "acme event to a missing endpoint", 422, "endpoints[0]")(
		g.api("POST", "/events/"+aEvt+"/replay", acmeToken, jsonMap{"endpoints": []string{"no-such-ep"}}))
	if foreign != none {
		t.Fatalf("foreign endpoint %+v, missing endpoint %+v: want the same answer", foreign, none)
	}
	wantProblem(t, "operator sends acme's event to globex", 422, "endpoints[0]")(
		g.api("POST", "/events/"+aEvt+"/replay", opToken, jsonMap{"endpoints": []string{"globex-ep"}}))
	if got := rcv.byPath(); got["/globex"] != 1 || got["/acme"] != 1 {
		t.Fatalf("deliveries %v: a refused replay was delivered", got)
	}
}

// secretSession is a gateway with a secret in every place one can be: a
// verified source per scheme, endpoints with signing secrets, admin tokens,
// and an endpoint URL carrying a credential in its query.
type secretSession struct {
	g       *gw
	secrets []string
	// answers are the bodies of every answer that must not show a secret.
	answers []string
}

// newSecret is a fresh random string that is easy to find in a log.
func newSecret(prefix string) string { return prefix + rand.Text() }

// TestSecuritySecretsNeverLeak runs a session that uses every secret,
// correctly and wrongly, then scans the gateway's logs (at debug level)
// and every error answer for each secret and its base64 body.
func TestSecuritySecretsNeverLeak(t *testing.T) {
	rcv := newReceiver(t)
	rcv.failAt("failing", true)
	refused, err := net.Listen("tcp", "127.0.0.1:0") // a port nobody answers on
	if err != nil {
		t.Fatal(err)
	}
	refusedURL := "http://" + refused.Addr().String()
	_ = refused.Close()

	stripeSecret, ghSecret, hmSecret := newSecret("whsec_stripe"), newSecret("gh"), newSecret("hm")
	epSecret, urlSecret := outbound.NewSecret(), newSecret("URLKEY")
	s := &secretSession{secrets: []string{testSecret, stripeSecret, ghSecret, hmSecret, epSecret, urlSecret, opToken, acmeToken}}
	extra := fmt.Sprintf(`  - id: stripe
    tenant: acme
    verify: {scheme: stripe, secrets: [%q]}
  - id: gh
    tenant: acme
    verify: {scheme: github, secrets: [%q]}
  - id: hm
    tenant: acme
    verify: {scheme: hmac, secrets: [%q], header: X-Sig, algorithm: sha256, encoding: hex, prefix: "sha256="}
endpoints:
  - {id: ep, tenant: acme, url: %q, secret: %q}
  - {id: failing, tenant: acme, url: %q}
  - {id: leaky-url, tenant: acme, url: %q}
`, stripeSecret, ghSecret, hmSecret, rcv.url("ep"), epSecret, rcv.url("failing"), refusedURL+"/hook?api_key="+urlSecret)
	g := startGateway(t, gwOptions{extra: extra})
	s.g = g
	keep := func(what string, want int) func(int, http.Header, []byte) {
		return func(st int, _ http.Header, b []byte) {
			t.Helper()
			if want != 0 && st != want {
				t.Fatalf("%s: %d %s, want %d", what, st, b, want)
			}
			s.answers = append(s.answers, string(b))
		}
	}
	body := []byte(`{"id":"evt_s1","type":"invoice.paid"}`)
	now := time.Now()
	// Ingest with wrong, missing, stale signatures; and with the secret
	// itself where a signature belongs (a misconfigured sender).
	for _, c := range []struct {
		source string
		hdr    map[string]string
	}{
		{"sw", nil},
		{"sw", signSW("msg_1", now.Add(-time.Hour), body)},
		{"sw", map[string]string{"webhook-id": "m", "webhook-timestamp": fmt.Sprint(now.Unix()), "webhook-signature": "v1," + testSecret}},
		{"stripe", map[string]string{"Stripe-Signature": fmt.Sprintf("t=%d,v1=%s", now.Unix(), stripeSecret)}},
		{"stripe", map[string]string{"Stripe-Signature": "t=1,v1=" + hex.EncodeToString(hmacSHA256([]byte(stripeSecret), "1."+string(body)))}},
		{"gh", map[string]string{"X-Hub-Signature-256": "sha256=" + ghSecret, "X-GitHub-Event": "push"}},
		{"hm", map[string]string{"X-Sig": hmSecret}},
		{"hm", map[string]string{"X-Sig": "sha256=" + hex.EncodeToString(hmacSHA256([]byte(hmSecret+"x"), string(body)))}},
	} {
		keep("bad signature for "+c.source, 401)(g.post(c.source, body, c.hdr))
	}
	// A valid ingest carrying the admin token and a cookie: not stored.
	keep("valid ingest", 202)(g.post("hm", body, map[string]string{
		"X-Sig":         "sha256=" + hex.EncodeToString(hmacSHA256([]byte(hmSecret), string(body))),
		"Authorization": "Bearer " + opToken, "Cookie": "session=" + acmeToken,
	}))
	// Admin calls with wrong tokens, each one byte off a real one.
	for _, tok := range []string{flipByte(opToken, 3), flipByte(acmeToken, 5)} {
		s.secrets = append(s.secrets, tok)
		keep("wrong token", 401)(g.api("GET", "/events", tok, nil))
		keep("wrong token", 401)(g.api("POST", "/endpoints", tok, jsonMap{"url": rcv.url("x"), "secret": epSecret}))
	}
	// Endpoints and sources created and changed with secrets, good and bad.
	apiSecret, rotated, srcSecret := outbound.NewSecret(), outbound.NewSecret(), outbound.NewSecret()
	badWhsec := "whsec_" + newSecret("not!base64")
	s.secrets = append(s.secrets, apiSecret, rotated, srcSecret, badWhsec)
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "api-ep", "url": rcv.url("api"), "secret": apiSecret}))
	keep("bad endpoint secret", 422)(g.api("POST", "/endpoints", acmeToken, jsonMap{"url": rcv.url("y"), "secret": badWhsec}))
	keep("bad endpoint secret patch", 422)(g.api("PATCH", "/endpoints/api-ep", acmeToken, jsonMap{"secret": badWhsec}))
	keep("bad rotation", 422)(g.api("POST", "/endpoints/api-ep/rotate-secret", acmeToken, jsonMap{"secret": badWhsec}))
	must[admin.Endpoint](t, 200)(g.api("POST", "/endpoints/api-ep/rotate-secret", acmeToken, jsonMap{"secret": rotated, "grace": "1h"}))
	keep("bad endpoint url", 422)(g.api("POST", "/endpoints", acmeToken, jsonMap{"url": "http://user:" + urlSecret + "@x.test/"}))
	keep("source with secret", 201)(g.api("POST", "/sources", acmeToken, jsonMap{"id": "s2", "verify": jsonMap{"scheme": "standard-webhooks", "secrets": []string{srcSecret}}}))
	keep("bad source secret", 422)(g.api("POST", "/sources", acmeToken, jsonMap{"id": "s3", "verify": jsonMap{"scheme": "standard-webhooks", "secrets": []string{badWhsec}}}))
	keep("bad source patch", 422)(g.api("PATCH", "/sources/s2", acmeToken, jsonMap{"verify": jsonMap{"scheme": "standard-webhooks", "secrets": []string{badWhsec}}}))
	keep("source read", 200)(g.api("GET", "/sources/s2", acmeToken, nil))
	keep("sources list", 200)(g.api("GET", "/sources", opToken, nil))
	// Deliveries: signed with every endpoint secret, to a receiver that
	// fails (warnings) and to a URL that refuses connections.
	keep("publish", 202)(g.api("POST", "/events", acmeToken, jsonMap{"source": "open", "type": "t", "payload": jsonMap{"id": "p1"}}))
	testsupport.WaitFor(t, 10*time.Second, "failed attempts and deliveries", func() bool {
		failed := map[string]bool{}
		for _, d := range must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries", opToken, nil)).Data {
			if d.AttemptCount >= 2 && d.State != "succeeded" {
				failed[d.Endpoint] = true
			}
		}
		return failed["failing"] && failed["leaky-url"] && rcv.countAt("api") >= 1 && rcv.countAt("ep") >= 1
	})
	for _, d := range must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries", opToken, nil)).Data {
		keep("delivery", 200)(g.api("GET", "/deliveries/"+d.ID, opToken, nil))
	}
	evs := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events", opToken, nil))
	for _, ev := range evs.Data {
		for name := range ev.Headers {
			if n := strings.ToLower(name); n == "authorization" || n == "cookie" {
				t.Fatalf("event %s stored the %s header", ev.ID, name)
			}
		}
		keep("event", 200)(g.api("GET", "/events/"+ev.ID, opToken, nil))
	}
	// Config errors with secrets in the wrong places.
	_, err = config.Parse(fmt.Appendf(nil, `
admin: {tokens: [{token: %q}, {token: %q}]}
sources:
  - {id: a, verify: {scheme: standard-webhooks, secrets: [%q]}}
  - {id: b, verify: {scheme: none, secrets: [%q]}}
  - {id: c, verify: {scheme: hmac, secrets: [%q], algorithm: md5}}
endpoints:
  - {id: e, url: %q, secret: %q}
  - {id: f, url: "https://x.test/", secret: %q}
`, opToken, opToken, badWhsec, ghSecret, hmSecret, "https://u:"+urlSecret+"@x.test/", badWhsec, epSecret+"!"), "bad.yaml", nil)
	if err == nil {
		t.Fatal("the bad config was accepted")
	}
	s.answers = append(s.answers, err.Error())

	logs := g.logs.String()
	if !strings.Contains(logs, "attempt failed") {
		t.Fatalf("the session logged no failed delivery; it does not exercise the logs:\n%s", logs)
	}
	for _, secret := range s.secrets {
		forms := []string{secret}
		if body, ok := strings.CutPrefix(secret, "whsec_"); ok && len(body) >= 8 {
			forms = append(forms, body)
		}
		for _, f := range forms {
			if strings.Contains(logs, f) {
				t.Errorf("a secret (%.10s…) is in the logs", f)
			}
			for _, a := range s.answers {
				if strings.Contains(a, f) {
					t.Errorf("a secret (%.10s…) is in an answer: %.300s", f, a)
				}
			}
		}
	}
}

func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// TestSecurityPrivateTargetsRefused: with allow_private_targets false,
// endpoints whose URL resolves to loopback or the unspecified address,
// however it is spelled (a hostname, IPv4, IPv6, IPv4-mapped IPv6), never
// reach the receiver listening there; each attempt records the refused
// address, and the delivery fails at max_attempts. (The config's are
// refused when dialled; the admin API refuses such literal URLs and
// localhost at once.)
func TestSecurityPrivateTargetsRefused(t *testing.T) {
	rcv := newReceiver(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(rcv.srv.URL, "http://"))
	hosts := map[string]string{
		"by-name": "localhost", "v4": "127.0.0.1", "v6": "[::1]", "mapped": "[::ffff:127.0.0.1]",
		"unspecified": "0.0.0.0", "other-loopback": "127.0.0.2",
	}
	var eps strings.Builder
	for id, host := range hosts {
		fmt.Fprintf(&eps, "  - {id: %s, tenant: acme, url: \"http://%s:%s/%s\"}\n", id, host, port, id)
	}
	g := startCustom(t, func(dir string) string {
		return fmt.Sprintf(`
server: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0", tokens: [{token: %s}]}
storage: {path: %q}
delivery:
  allow_private_targets: false
  timeout: 2s
  retry: {initial_interval: 10ms, max_interval: 20ms, max_attempts: 2}
sources:
  - {id: open, tenant: acme, verify: {scheme: none}, event_id: json:/id}
endpoints:
%s`, opToken, dir, eps.String())
	}, nil)
	// The config's are warned about at start, by id, without the URL (a
	// literal address or localhost; all of them here).
	var warned int
	for _, l := range strings.Split(g.logs.String(), "\n") {
		if strings.Contains(l, "its deliveries will be refused") {
			if strings.Contains(l, "http") || strings.Contains(l, port) {
				t.Fatalf("the warning shows the URL: %s", l)
			}
			warned++
		}
	}
	if warned != len(hosts) {
		t.Fatalf("%d start warnings, want one per endpoint (%d):\n%s", warned, len(hosts), g.logs.String())
	}
	// The admin API refuses such URLs up front (the config's only warn, as
	// they started before): every delivery to them would be refused.
	for _, host := range []string{"localhost", "app.localhost", "127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0", "10.1.2.3", "169.254.169.254", "[fd00::1]"} {
		u := "http://" + host + ":" + port + "/api"
		st, _, b := g.api("POST", "/endpoints", opToken, jsonMap{"id": "api", "tenant": "acme", "url": u})
		if st != 422 || !strings.Contains(string(b), "allow_private_targets") || strings.Contains(string(b), host) {
			t.Fatalf("POST /endpoints with %s: %d %s; want 422 naming the setting, not the URL", u, st, b)
		}
		st, _, b = g.api("PATCH", "/endpoints/v4", opToken, jsonMap{"url": u})
		if st != 422 {
			t.Fatalf("PATCH to %s: %d %s; want 422", u, st, b)
		}
	}
	// Other fields of an endpoint with such a URL can still change, also
	// when a client sends the URL back unchanged.
	v4 := must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/v4", opToken, jsonMap{"timeout": "3s"}))
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/v4", opToken, jsonMap{"timeout": "4s", "url": v4.URL}))
	st, _, b := g.post("open", []byte(`{"id":"ssrf"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	var ds []admin.Delivery
	testsupport.WaitFor(t, 15*time.Second, "every delivery to fail", func() bool {
		ds = must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+evt, opToken, nil)).Data
		for _, d := range ds {
			if d.State != "failed" {
				return false
			}
		}
		return len(ds) == len(hosts)
	})
	for _, d := range ds {
		full := must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+d.ID, opToken, nil))
		if full.Attempts == nil || len(*full.Attempts) != 2 {
			t.Fatalf("delivery to %s: %+v, want 2 attempts", d.Endpoint, full)
		}
		for _, a := range *full.Attempts {
			if a.StatusCode != 0 || !strings.Contains(a.Error, "refused to connect") || !strings.Contains(a.Error, "allow_private_targets") {
				t.Fatalf("delivery to %s, attempt %+v: want a refused-address error", d.Endpoint, a)
			}
		}
	}
	if n := rcv.count(); n != 0 {
		t.Fatalf("the receiver on loopback got %d requests", n)
	}
}

// stripeHeader signs body as Stripe does, computed independently here.
func stripeHeader(secret string, ts time.Time, body []byte) map[string]string {
	t := fmt.Sprint(ts.Unix())
	return map[string]string{"Stripe-Signature": "t=" + t + ",v1=" + hex.EncodeToString(hmacSHA256([]byte(secret), t+"."+string(body)))}
}

// TestSecurityReplayOutsideTolerance: a correctly signed Standard Webhooks
// or Stripe request is accepted; the same request sent again once its
// signed timestamp is older than the source's tolerance is refused with
// 401, as is a never-seen event signed outside the tolerance, and neither
// stores anything.
func TestSecurityReplayOutsideTolerance(t *testing.T) {
	t.Parallel()
	stripeSecret := newSecret("whsec_")
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`  - id: sw-fast
    tenant: acme
    verify: {scheme: standard-webhooks, secrets: [%q], tolerance: 1s}
  - id: stripe-fast
    tenant: acme
    verify: {scheme: stripe, secrets: [%q], tolerance: 1s}
`, testSecret, stripeSecret)})
	for _, c := range []struct {
		source string
		sign   func(id string, ts time.Time, body []byte) map[string]string
	}{
		{"sw-fast", signSW},
		{"stripe-fast", func(_ string, ts time.Time, body []byte) map[string]string {
			return stripeHeader(stripeSecret, ts, body)
		}},
	} {
		body := []byte(`{"id":"evt_` + c.source + `","type":"t"}`)
		// Signed with the next whole second: the header carries whole
		// seconds, so time.Now() late in a second (X.99) would be signed X
		// and refused by a 1s tolerance after a few ms in flight. The next
		// whole second stays within the tolerance for up to 1s in flight.
		hdr := c.sign("msg_"+c.source, time.Now().Truncate(time.Second).Add(time.Second), body)
		if st, _, b := g.post(c.source, body, hdr); st != 202 {
			t.Fatalf("%s: fresh request %d %s", c.source, st, b)
		}
		testsupport.WaitFor(t, 10*time.Second, c.source+" replay to be refused", func() bool {
			st, _, _ := g.post(c.source, body, hdr)
			return st == 401
		})
		st, hdr2, b := g.post(c.source, body, hdr)
		if p := decodeProblem(t, hdr2, b); st != 401 || p.Status != 401 {
			t.Fatalf("%s: replay %d %s", c.source, st, b)
		}
		fresh := []byte(`{"id":"evt_late_` + c.source + `","type":"t"}`)
		if st, _, b := g.post(c.source, fresh, c.sign("msg_late_"+c.source, time.Now().Add(-3*time.Second), fresh)); st != 401 {
			t.Fatalf("%s: a new event signed outside the tolerance: %d %s", c.source, st, b)
		}
		evs, _, err := g.Store().ListEvents(t.Context(), storage.EventFilter{Source: c.source})
		if err != nil || len(evs) != 1 {
			t.Fatalf("%s: %d events stored (%v), want only the fresh one", c.source, len(evs), err)
		}
	}
}

// TestSecurityTrialTokenOnlyOnLoopback: the root config's fallback admin
// token is refused when the admin listener is reachable from other hosts.
func TestSecurityTrialTokenOnlyOnLoopback(t *testing.T) {
	for listen, ok := range map[string]bool{"127.0.0.1:8081": true, "localhost:8081": true, "[::1]:8081": true, ":8081": false, "0.0.0.0:8081": false, "10.1.2.3:8081": false} {
		cfg := &config.Config{Admin: config.AdminConfig{Listen: listen, Tokens: []config.TokenConfig{{Token: config.DevAdminToken}}}}
		if err := config.CheckAdminExposure(cfg); (err == nil) != ok {
			t.Errorf("%s: %v", listen, err)
		}
		cfg.Admin.Tokens[0].Token = "a-real-secret-token"
		if err := config.CheckAdminExposure(cfg); err != nil {
			t.Errorf("%s with a real token: %v", listen, err)
		}
	}
}
