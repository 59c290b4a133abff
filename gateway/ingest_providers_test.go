package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// shopifySecret is the signing secret of the test source "shop".
const shopifySecret = "shpss_review7_secret"

// signShopify signs body as Shopify does: base64 HMAC-SHA256 of the raw
// body keyed with the app's secret (shopify.dev, "Verify webhooks").
func signShopify(body []byte) string {
	m := hmac.New(sha256.New, []byte(shopifySecret))
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// TestIngestShopifyTopicReachesStarEndpoint: a Shopify webhook's type is
// its X-Shopify-Topic ("orders/create"); an endpoint subscribed to
// event_types ["*"] must get it, like one with no filter.
func TestIngestShopifyTopicReachesStarEndpoint(t *testing.T) {
	rcv := newReceiver(t)
	extra := fmt.Sprintf(`  - id: shop
    tenant: acme
    verify: {scheme: shopify, secrets: [%q]}
endpoints:
  - {id: everything, tenant: acme, url: %q, sources: [shop]}
  - {id: star, tenant: acme, url: %q, sources: [shop], event_types: ["*"]}
`, shopifySecret, rcv.url("everything"), rcv.url("star"))
	g := startGateway(t, gwOptions{extra: extra})
	body := []byte(`{"id":820982911946154500,"email":"jon@example.com"}`)
	st, _, b := g.post("shop", body, map[string]string{
		"X-Shopify-Hmac-Sha256": signShopify(body),
		"X-Shopify-Topic":       "orders/create",
		"X-Shopify-Webhook-Id":  "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
	})
	if st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, d := range ds {
		got[d.Endpoint]++
	}
	if got["everything"] != 1 || got["star"] != 1 {
		t.Fatalf("deliveries per endpoint %v, want one for \"everything\" and one for \"star\" (event_types [\"*\"])", got)
	}
	testsupport.WaitFor(t, 10*time.Second, "both deliveries", func() bool { return rcv.count() >= 2 })
}

// signStripe signs body as Stripe does: "t=<unix>,v1=<hex HMAC-SHA256 of
// "<t>.<body>">", keyed with the whole whsec_ string (stripe.com/docs,
// "Verify webhook signatures manually").
func signStripe(secret string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.%s", ts.Unix(), body)
	return fmt.Sprintf("t=%d,v1=%x", ts.Unix(), m.Sum(nil))
}

// TestIngestStripeConfigToleranceAndRotation (a passing check): a stripe
// source's tolerance and rotated secrets from config.yaml reach the
// verifier, through the store, and still do after a restart; the event ID
// and type come from the body (json:/id, json:/type).
func TestIngestStripeConfigToleranceAndRotation(t *testing.T) {
	const oldSecret, newSecret = "whsec_old_review7", "whsec_new_review7"
	extra := fmt.Sprintf(`  - id: stripe
    tenant: acme
    verify: {scheme: stripe, secrets: [%q, %q], tolerance: 10m}
`, newSecret, oldSecret)
	g := startGateway(t, gwOptions{extra: extra})
	for round := range 2 {
		body := []byte(fmt.Sprintf(`{"id":"evt_r7_%d","object":"event","type":"invoice.paid"}`, round))
		// Seven minutes old: outside the default 5m, inside the configured 10m.
		signed := time.Now().Add(-7 * time.Minute)
		st, _, b := g.post("stripe", body, map[string]string{"Stripe-Signature": signStripe(oldSecret, signed, body)})
		if st != 202 {
			t.Fatalf("round %d: old secret, 7m old: %d %s", round, st, b)
		}
		if want := fmt.Sprintf(`"event_id":"evt_r7_%d"`, round); !strings.Contains(string(b), want) {
			t.Fatalf("round %d: answer %s, want %s", round, b, want)
		}
		// During a roll Stripe sends one v1 per secret.
		both := signStripe(newSecret, signed, body) + "," + signStripe(oldSecret, signed, body)[len(fmt.Sprintf("t=%d,", signed.Unix())):]
		if st, hdr, b := g.post("stripe", body, map[string]string{"Stripe-Signature": both}); st != 202 || hdr.Get(inbound.HeaderReplayed) != "true" {
			t.Fatalf("round %d: retry with both v1: %d %s replayed=%q", round, st, b, hdr.Get(inbound.HeaderReplayed))
		}
		stale := time.Now().Add(-11 * time.Minute)
		if st, _, b := g.post("stripe", body, map[string]string{"Stripe-Signature": signStripe(newSecret, stale, body)}); st != 401 {
			t.Fatalf("round %d: 11m old: %d %s, want 401", round, st, b)
		}
		g = g.restart(gwOptions{extra: extra})
	}
}

// signSlack signs body as Slack does: "v0=" + hex HMAC-SHA256 of
// "v0:<timestamp>:<body>" (api.slack.com, "Verifying requests from Slack").
func signSlack(secret string, ts time.Time, body []byte) map[string]string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "v0:%d:%s", ts.Unix(), body)
	return map[string]string{
		"X-Slack-Signature":         fmt.Sprintf("v0=%x", m.Sum(nil)),
		"X-Slack-Request-Timestamp": fmt.Sprint(ts.Unix()),
	}
}

// TestIngestSlackURLVerification: Slack enables an Events API URL only
// once it answers the signed url_verification request with its challenge.
// That is a handshake, not an event: nothing is stored or delivered. An
// unsigned one is refused like any request.
func TestIngestSlackURLVerification(t *testing.T) {
	const secret = "8f742231b10e8888abcd99yyyzzz85a5"
	g := startGateway(t, gwOptions{extra: "  - id: slack\n    tenant: acme\n    verify: {scheme: slack, secrets: [" + secret + "]}\n"})
	body := []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	st, hdr, b := g.post("slack", body, signSlack(secret, time.Now(), body))
	if st != 200 || string(b) != `{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}` || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("url_verification: %d %q %s", st, hdr.Get("Content-Type"), b)
	}
	if st, _, b := g.post("slack", body, nil); st != 401 {
		t.Fatalf("unsigned url_verification: %d %s", st, b)
	}
	if st, _, b := g.post("slack", body, signSlack("another secret", time.Now(), body)); st != 401 {
		t.Fatalf("url_verification signed with another secret: %d %s", st, b)
	}
	evs, _, err := g.Store().ListEvents(context.Background(), storage.EventFilter{Limit: 10})
	if err != nil || len(evs) != 0 {
		t.Fatalf("events stored for handshakes: %+v %v", evs, err)
	}
	event := []byte(`{"token":"x","team_id":"T1","type":"event_callback","event_id":"Ev0PV52K21","event":{"type":"app_mention","text":"hi"}}`)
	if st, _, b := g.post("slack", event, signSlack(secret, time.Now(), event)); st != 202 || !strings.Contains(string(b), `"event_id":"Ev0PV52K21"`) {
		t.Fatalf("event_callback: %d %s", st, b)
	}
}

// Black-box tests of webhook ingest (POST /ingest/{source}) against SPEC
// sections 2-3 and the providers' published signature formats. Every
// signature here is computed with crypto/hmac, never with hookgate's code.

// Secrets of the sources ingestSchemeSources adds to testConfig.
const (
	secretStripeNew = "whsec_zz_stripe_new_0123456789"
	secretStripeOld = "whsec_zz_stripe_old_9876543210"
	secretGitHub    = "zz-github-secret-It's a Secret to Everybody"
	secretShopify   = "shpss_zz_review_shopify"
	secretSlack     = "8f742231b10e8888abcd99zzzyyy85a5"
	secretHMAC512   = "zz-hmac-512-secret"
	secretHMAC1     = "zz-hmac-1-secret"
	// secretSW2 is a second Standard Webhooks secret (rotation).
	secretSW2 = "whsec_dGhpcy1pcy1hLXNlY29uZC1zdy1zZWNyZXQtMTIz"
)

var ingestSchemeSources = fmt.Sprintf(`  - id: zstripe
    tenant: acme
    verify: {scheme: stripe, secrets: [%q, %q]}
  - id: zgh
    tenant: acme
    verify: {scheme: github, secrets: [%q]}
  - id: zshop
    tenant: acme
    verify: {scheme: shopify, secrets: [%q]}
  - id: zslack
    tenant: acme
    verify: {scheme: slack, secrets: [%q]}
  - id: zsw
    tenant: acme
    verify: {scheme: standard-webhooks, secrets: [%q, %q]}
  - id: zh512
    tenant: acme
    verify: {scheme: hmac, secrets: [%q], header: X-Zz-Signature, algorithm: sha512, encoding: base64, prefix: "sha512="}
  - id: zh1
    tenant: acme
    verify: {scheme: hmac, secrets: [%q], header: x-zz-sig, algorithm: sha1}
  - id: zexpr
    tenant: acme
    verify: {scheme: none}
    event_id: "json:/a~1b/c~0d+query:acct"
    event_type: "header:X-Zz-Kind"
  - id: zptr
    tenant: acme
    verify: {scheme: none}
    event_id: "json:/~01/+json:/"
  - id: zarr
    tenant: acme
    verify: {scheme: none}
    event_id: "json:/data/1/id"
    event_type: "json:/data/1/type"
`, secretStripeNew, secretStripeOld, secretGitHub, secretShopify, secretSlack, testSecret, secretSW2, secretHMAC512, secretHMAC1)

func startSchemesGateway(t *testing.T) *gw {
	t.Helper()
	return startGateway(t, gwOptions{extra: ingestSchemeSources})
}

func macOf(h func() hash.Hash, key []byte, parts ...[]byte) []byte {
	m := hmac.New(h, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// stripeV1Sig is the hex v1 signature of body at ts under secret.
func stripeV1Sig(secret string, ts int64, body []byte) string {
	return hex.EncodeToString(macOf(sha256.New, []byte(secret), fmt.Appendf(nil, "%d.", ts), body))
}

func gitHubSig(secret string, body []byte) string {
	return "sha256=" + hex.EncodeToString(macOf(sha256.New, []byte(secret), body))
}

func shopifySig(secret string, body []byte) string {
	return base64.StdEncoding.EncodeToString(macOf(sha256.New, []byte(secret), body))
}

func slackSig(secret string, ts int64, body []byte) string {
	return "v0=" + hex.EncodeToString(macOf(sha256.New, []byte(secret), fmt.Appendf(nil, "v0:%d:", ts), body))
}

// swSig is one "v1,<base64>" Standard Webhooks signature with a whsec_
// secret (prefix optional).
func swSig(secret, id string, ts int64, body []byte) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	return "v1," + base64.StdEncoding.EncodeToString(macOf(sha256.New, key, fmt.Appendf(nil, "%s.%d.", id, ts), body))
}

// postIngest sends body to /ingest/{source}{query} with hdr (repeated values
// are sent as repeated header lines).
func postIngest(g *gw, target string, body []byte, hdr http.Header) (int, http.Header, []byte) {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+g.PublicAddr()+"/ingest/"+target, bytes.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	return do(g.t, req)
}

func hdrs(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// mustAccept checks a first 202 {"id","event_id"} and returns it.
func mustAccept(t *testing.T, what string) func(st int, hdr http.Header, b []byte) map[string]string {
	return func(st int, hdr http.Header, b []byte) map[string]string {
		t.Helper()
		if st != 202 {
			t.Fatalf("%s: the provider got %d %s, want 202 (SPEC section 3)", what, st, b)
		}
		var m map[string]string
		if err := json.Unmarshal(b, &m); err != nil || !strings.HasPrefix(m["id"], "evt_") || m["event_id"] == "" || len(m) != 2 {
			t.Fatalf("%s: answer %s is not {\"id\":\"evt_…\",\"event_id\":\"…\"} (%v)", what, b, err)
		}
		if hdr.Get(inbound.HeaderReplayed) != "" {
			t.Fatalf("%s: a first request was marked Idempotent-Replayed", what)
		}
		return m
	}
}

// mustRefuse checks a 401 problem+json that echoes neither the secrets
// nor the signatures sent.
func mustRefuse(t *testing.T, what string, st int, hdr http.Header, b []byte, sent http.Header) {
	t.Helper()
	if st != 401 {
		t.Errorf("%s: the gateway answered %d %s, want 401 (SPEC section 3: signature missing, wrong, or timestamp outside tolerance)", what, st, b)
		return
	}
	p := decodeProblem(t, hdr, b)
	if p.Status != 401 || p.Type == "" || p.Title == "" {
		t.Errorf("%s: incomplete problem %s", what, b)
	}
	for _, s := range []string{secretStripeNew, secretStripeOld, secretGitHub, secretShopify, secretSlack, secretHMAC512, secretHMAC1, testSecret, secretSW2} {
		if strings.Contains(string(b), s) {
			t.Errorf("%s: the 401 echoes a secret: %s", what, b)
		}
	}
	for _, vs := range sent {
		for _, v := range vs {
			if len(v) >= 16 && strings.Contains(string(b), v) {
				t.Errorf("%s: the 401 echoes a request header value %q: %s", what, v, b)
			}
		}
	}
}

func schemeEvent(t *testing.T, g *gw, id string) admin.Event {
	t.Helper()
	return must[admin.Event](t, 200)(g.api("GET", "/events/"+id, acmeToken, nil))
}

func countEvents(t *testing.T, g *gw) int {
	t.Helper()
	return len(eventsIn(t, g.Store()))
}

// Stripe: several v1 values where only one matches (an endpoint secret
// roll), v0 ignored, a rotated (second) secret, and the refusals.
func TestIngestStripeSignatures(t *testing.T) {
	g := startSchemesGateway(t)
	now := time.Now().Unix()
	body := []byte(`{"id":"evt_zz_s1","object":"event","type":"invoice.paid"}`)
	bogus := strings.Repeat("ab", 32)
	hdr := hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s,v1=%s,v0=%s", now, bogus, stripeV1Sig(secretStripeOld, now, body), bogus))
	a := mustAccept(t, "stripe: one of two v1 valid (old secret)")(postIngest(g, "zstripe", body, hdr))
	if a["event_id"] != "evt_zz_s1" {
		t.Errorf("stripe event_id %q, want json:/id evt_zz_s1", a["event_id"])
	}
	if ev := schemeEvent(t, g, a["id"]); ev.Type != "invoice.paid" || ev.Source != "zstripe" {
		t.Errorf("stripe event stored as %+v, want type invoice.paid", ev)
	}
	body2 := []byte(`{"id":"evt_zz_s2","type":"invoice.paid"}`)
	for name, h := range map[string]http.Header{
		"wrong secret":      hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeV1Sig("whsec_other", now, body2))),
		"tampered body":     hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeV1Sig(secretStripeNew, now, body))),
		"signed other t":    hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeV1Sig(secretStripeNew, now-1, body2))),
		"stale 6m":          hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now-360, stripeV1Sig(secretStripeNew, now-360, body2))),
		"future 6m":         hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now+360, stripeV1Sig(secretStripeNew, now+360, body2))),
		"only v0":           hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v0=%s", now, stripeV1Sig(secretStripeNew, now, body2))),
		"no t":              hdrs("Stripe-Signature", "v1="+stripeV1Sig(secretStripeNew, now, body2)),
		"empty":             hdrs("Stripe-Signature", ""),
		"missing":           hdrs(),
		"truncated v1":      hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeV1Sig(secretStripeNew, now, body2)[:62])),
		"v1 in other field": hdrs("X-Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeV1Sig(secretStripeNew, now, body2))),
	} {
		st, rh, b := postIngest(g, "zstripe", body2, h)
		mustRefuse(t, "stripe "+name, st, rh, b, h)
	}
	if n := countEvents(t, g); n != 1 {
		t.Errorf("%d events stored, want only the valid one (nothing stored on a 401)", n)
	}
	// The refused requests claimed nothing: the genuine event with that ID
	// (another body than the forgeries) is a first 202, not a 422.
	genuine := []byte(`{"id":"evt_zz_s2","type":"invoice.paid","genuine":true}`)
	mustAccept(t, "genuine event after forgeries of its id")(postIngest(g, "zstripe", genuine,
		hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeV1Sig(secretStripeNew, now, genuine)))))
}

// GitHub: X-Hub-Signature-256 over the raw body; the default event ID is
// the hook ID and delivery GUID joined with "/", the type X-GitHub-Event.
func TestIngestGitHubSignatureAndDefaults(t *testing.T) {
	g := startSchemesGateway(t)
	body := []byte("{\n  \"action\": \"opened\",\n  \"number\": 7\n}\n")
	hdr := hdrs("X-Hub-Signature-256", gitHubSig(secretGitHub, body), "X-GitHub-Event", "pull_request",
		"X-GitHub-Hook-ID", "292430182", "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		"X-Hub-Signature", "sha1="+hex.EncodeToString(macOf(sha1.New, []byte(secretGitHub), body)))
	a := mustAccept(t, "github valid")(postIngest(g, "zgh", body, hdr))
	if a["event_id"] != "292430182/72d3162e-cc78-11e3-81ab-4c9367dc0958" {
		t.Errorf("github event_id %q, want hook id / delivery", a["event_id"])
	}
	ev := schemeEvent(t, g, a["id"])
	if ev.Type != "pull_request" || ev.Body == nil || *ev.Body != string(body) {
		t.Errorf("github event: type %q body %v, want pull_request and the raw body", ev.Type, ev.Body)
	}
	// Lower-case header names on the wire, as HTTP/2 proxies forward them.
	body2 := []byte(`{"zen":"Keep it logically awesome."}`)
	raw := "POST /ingest/zgh HTTP/1.1\r\nHost: gw\r\ncontent-type: application/json\r\n" +
		"x-hub-signature-256: " + gitHubSig(secretGitHub, body2) + "\r\nx-github-event: ping\r\n" +
		"x-github-hook-id: 1\r\nx-github-delivery: d-2\r\nContent-Length: " + fmt.Sprint(len(body2)) + "\r\nConnection: close\r\n\r\n" + string(body2)
	st, rh, b := rawRequest(t, g.PublicAddr(), raw)
	if a := mustAccept(t, "github lower-case header names")(st, rh, b); a["event_id"] != "1/d-2" {
		t.Errorf("event_id %q from lower-case headers, want 1/d-2", a["event_id"])
	}
	// Upper-case hex is the same signature.
	body3 := []byte(`{"n":3}`)
	up := "sha256=" + strings.ToUpper(hex.EncodeToString(macOf(sha256.New, []byte(secretGitHub), body3)))
	mustAccept(t, "github upper-case hex")(postIngest(g, "zgh", body3, hdrs("X-Hub-Signature-256", up, "X-GitHub-Hook-ID", "1", "X-GitHub-Delivery", "d-3")))

	body4 := []byte(`{"n":4}`)
	for name, h := range map[string]http.Header{
		"sha1 only":       hdrs("X-Hub-Signature", "sha1="+hex.EncodeToString(macOf(sha1.New, []byte(secretGitHub), body4))),
		"no prefix":       hdrs("X-Hub-Signature-256", strings.TrimPrefix(gitHubSig(secretGitHub, body4), "sha256=")),
		"wrong secret":    hdrs("X-Hub-Signature-256", gitHubSig("nope", body4)),
		"tampered":        hdrs("X-Hub-Signature-256", gitHubSig(secretGitHub, body3)),
		"sha1= prefix":    hdrs("X-Hub-Signature-256", "sha1="+strings.TrimPrefix(gitHubSig(secretGitHub, body4), "sha256=")),
		"trailing junk":   hdrs("X-Hub-Signature-256", gitHubSig(secretGitHub, body4)+"00"),
		"secret as value": hdrs("X-Hub-Signature-256", "sha256="+secretGitHub),
	} {
		st, rh, b := postIngest(g, "zgh", body4, h)
		mustRefuse(t, "github "+name, st, rh, b, h)
	}
}

// Shopify: base64 HMAC-SHA256 of the body; defaults X-Shopify-Webhook-Id
// and X-Shopify-Topic.
func TestIngestShopify(t *testing.T) {
	g := startSchemesGateway(t)
	body := []byte(`{"id":820982911946154508,"email":"jon@doe.ca"}`)
	a := mustAccept(t, "shopify valid")(postIngest(g, "zshop", body, hdrs("X-Shopify-Hmac-Sha256", shopifySig(secretShopify, body),
		"X-Shopify-Topic", "orders/create", "X-Shopify-Webhook-Id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")))
	if a["event_id"] != "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043" || schemeEvent(t, g, a["id"]).Type != "orders/create" {
		t.Errorf("shopify: %v, type %q", a, schemeEvent(t, g, a["id"]).Type)
	}
	for name, h := range map[string]http.Header{
		"hex instead of base64": hdrs("X-Shopify-Hmac-Sha256", hex.EncodeToString(macOf(sha256.New, []byte(secretShopify), body))),
		"wrong secret":          hdrs("X-Shopify-Hmac-Sha256", shopifySig("x", body)),
		"tampered":              hdrs("X-Shopify-Hmac-Sha256", shopifySig(secretShopify, append([]byte(" "), body...))),
	} {
		st, rh, ans := postIngest(g, "zshop", body, h)
		mustRefuse(t, "shopify "+name, st, rh, ans, h)
	}
}

// Slack: v0= hex HMAC of "v0:{ts}:{body}"; defaults json:/event_id and
// json:/event/type.
func TestIngestSlack(t *testing.T) {
	g := startSchemesGateway(t)
	now := time.Now().Unix()
	body := []byte(`{"token":"x","team_id":"T1","event":{"type":"app_mention","text":"hi"},"type":"event_callback","event_id":"Ev08MFMKH6","event_time":1}`)
	h := hdrs("X-Slack-Signature", slackSig(secretSlack, now, body), "X-Slack-Request-Timestamp", fmt.Sprint(now))
	a := mustAccept(t, "slack valid")(postIngest(g, "zslack", body, h))
	if a["event_id"] != "Ev08MFMKH6" || schemeEvent(t, g, a["id"]).Type != "app_mention" {
		t.Errorf("slack: %v type %q, want Ev08MFMKH6 app_mention", a, schemeEvent(t, g, a["id"]).Type)
	}
	// Slack retries with X-Slack-Retry-Num and a new timestamp: same event.
	later := now + 2
	st, rh, b := postIngest(g, "zslack", body, hdrs("X-Slack-Signature", slackSig(secretSlack, later, body),
		"X-Slack-Request-Timestamp", fmt.Sprint(later), "X-Slack-Retry-Num", "1", "X-Slack-Retry-Reason", "http_timeout"))
	if st != 202 || rh.Get(inbound.HeaderReplayed) != "true" {
		t.Errorf("slack retry: %d %s replayed=%q, want the first answer replayed", st, b, rh.Get(inbound.HeaderReplayed))
	}
	body2 := []byte(`{"type":"event_callback","event_id":"Ev2","event":{"type":"message"}}`)
	for name, h := range map[string]http.Header{
		"ts header differs from signed": hdrs("X-Slack-Signature", slackSig(secretSlack, now, body2), "X-Slack-Request-Timestamp", fmt.Sprint(now+1)),
		"stale":                         hdrs("X-Slack-Signature", slackSig(secretSlack, now-400, body2), "X-Slack-Request-Timestamp", fmt.Sprint(now-400)),
		"future":                        hdrs("X-Slack-Signature", slackSig(secretSlack, now+400, body2), "X-Slack-Request-Timestamp", fmt.Sprint(now+400)),
		"no timestamp":                  hdrs("X-Slack-Signature", slackSig(secretSlack, now, body2)),
		"no v0=":                        hdrs("X-Slack-Signature", strings.TrimPrefix(slackSig(secretSlack, now, body2), "v0="), "X-Slack-Request-Timestamp", fmt.Sprint(now)),
		"wrong secret":                  hdrs("X-Slack-Signature", slackSig("other", now, body2), "X-Slack-Request-Timestamp", fmt.Sprint(now)),
		"fractional ts":                 hdrs("X-Slack-Signature", slackSig(secretSlack, now, body2), "X-Slack-Request-Timestamp", fmt.Sprint(now)+".0"),
	} {
		st, rh, b := postIngest(g, "zslack", body2, h)
		mustRefuse(t, "slack "+name, st, rh, b, h)
	}
}

// Standard Webhooks: several signatures where only the last is valid, v1a
// and unknown versions skipped, the svix-* names, and a rotated second
// secret.
func TestIngestStandardWebhooks(t *testing.T) {
	g := startSchemesGateway(t)
	now := time.Now().Unix()
	body := []byte(`{"type":"user.created","data":{"id":1}}`)
	bogus := "v1," + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	sig := bogus + " v1a,c29tZXRoaW5n v2,abc  " + swSig(testSecret, "msg_zz1", now, body)
	a := mustAccept(t, "sw: last of several signatures valid")(postIngest(g, "zsw", body,
		hdrs("webhook-id", "msg_zz1", "webhook-timestamp", fmt.Sprint(now), "webhook-signature", sig)))
	if a["event_id"] != "msg_zz1" || schemeEvent(t, g, a["id"]).Type != "user.created" {
		t.Errorf("sw: %v", a)
	}
	a = mustAccept(t, "sw: svix-* headers, rotated second secret")(postIngest(g, "zsw", body,
		hdrs("svix-id", "msg_zz2", "svix-timestamp", fmt.Sprint(now), "svix-signature", swSig(secretSW2, "msg_zz2", now, body))))
	if a["event_id"] != "msg_zz2" {
		t.Errorf("sw via svix-id: event_id %q, want msg_zz2", a["event_id"])
	}
	for name, h := range map[string]http.Header{
		"id differs from signed": hdrs("webhook-id", "msg_zz3", "webhook-timestamp", fmt.Sprint(now), "webhook-signature", swSig(testSecret, "msg_zz4", now, body)),
		"only v1a":               hdrs("webhook-id", "msg_zz3", "webhook-timestamp", fmt.Sprint(now), "webhook-signature", "v1a,"+strings.TrimPrefix(swSig(testSecret, "msg_zz3", now, body), "v1,")),
		"mixed families":         hdrs("webhook-id", "msg_zz3", "svix-timestamp", fmt.Sprint(now), "svix-signature", swSig(testSecret, "msg_zz3", now, body)),
		"stale":                  hdrs("webhook-id", "msg_zz3", "webhook-timestamp", fmt.Sprint(now-301), "webhook-signature", swSig(testSecret, "msg_zz3", now-301, body)),
		"ms timestamp":           hdrs("webhook-id", "msg_zz3", "webhook-timestamp", fmt.Sprint(now*1000), "webhook-signature", swSig(testSecret, "msg_zz3", now*1000, body)),
		"wrong secret":           hdrs("webhook-id", "msg_zz3", "webhook-timestamp", fmt.Sprint(now), "webhook-signature", swSig("whsec_"+base64.StdEncoding.EncodeToString([]byte("another-secret-key-here")), "msg_zz3", now, body)),
	} {
		st, rh, b := postIngest(g, "zsw", body, h)
		mustRefuse(t, "sw "+name, st, rh, b, h)
	}
}

// The hmac scheme's options: header (any case in config and on the wire),
// algorithm, encoding and prefix.
func TestIngestHMACSchemeOptions(t *testing.T) {
	g := startSchemesGateway(t)
	body := []byte(`{"id":"h-1","type":"t"}`)
	sig512 := "sha512=" + base64.StdEncoding.EncodeToString(macOf(sha512.New, []byte(secretHMAC512), body))
	mustAccept(t, "hmac sha512 base64 prefix")(postIngest(g, "zh512", body, hdrs("X-ZZ-SIGNATURE", sig512)))
	sig1 := hex.EncodeToString(macOf(sha1.New, []byte(secretHMAC1), body))
	mustAccept(t, "hmac sha1 hex, header configured lower-case")(postIngest(g, "zh1", body, hdrs("X-Zz-Sig", sig1)))
	body2 := []byte(`{"id":"h-2"}`)
	for name, c := range map[string]struct {
		src string
		h   http.Header
	}{
		"512 without prefix":   {"zh512", hdrs("X-Zz-Signature", base64.StdEncoding.EncodeToString(macOf(sha512.New, []byte(secretHMAC512), body2)))},
		"512 hex":              {"zh512", hdrs("X-Zz-Signature", "sha512="+hex.EncodeToString(macOf(sha512.New, []byte(secretHMAC512), body2)))},
		"512 as sha256":        {"zh512", hdrs("X-Zz-Signature", "sha512="+base64.StdEncoding.EncodeToString(macOf(sha256.New, []byte(secretHMAC512), body2)))},
		"sha1 as sha256":       {"zh1", hdrs("X-Zz-Sig", hex.EncodeToString(macOf(sha256.New, []byte(secretHMAC1), body2)))},
		"sha1 in other header": {"zh1", hdrs("X-Signature", hex.EncodeToString(macOf(sha1.New, []byte(secretHMAC1), body2)))},
	} {
		st, rh, b := postIngest(g, c.src, body2, c.h)
		mustRefuse(t, "hmac "+name, st, rh, b, c.h)
	}
}

// Event-ID and type expressions: RFC 6901 escapes, query:, composites
// joined with "/", header: types, array indexes, numbers, and the
// fallbacks (Idempotency-Key, then the body's SHA-256).
func TestIngestExpressions(t *testing.T) {
	g := startSchemesGateway(t)
	// json:/a~1b/c~0d is member "a/b", then member "c~d".
	body := []byte(`{"a/b":{"c~d":"inner","c":"wrong","cd":"wrong"},"a":{"b":{"c~d":"wrong"}}}`)
	a := mustAccept(t, "escaped pointer + query")(postIngest(g, "zexpr?acct=acct_9", body, hdrs("X-Zz-Kind", "kind.one")))
	if a["event_id"] != "inner/acct_9" {
		t.Errorf(`json:/a~1b/c~0d+query:acct gave event_id %q, want "inner/acct_9" (RFC 6901: ~1 is "/", ~0 is "~")`, a["event_id"])
	}
	if typ := schemeEvent(t, g, a["id"]).Type; typ != "kind.one" {
		t.Errorf("event_type header:X-Zz-Kind gave %q, want kind.one", typ)
	}
	// A composite with a missing part yields nothing: Idempotency-Key.
	a = mustAccept(t, "composite part missing")(postIngest(g, "zexpr", body, hdrs("Idempotency-Key", "idem-zz-1")))
	if a["event_id"] != "idem-zz-1" {
		t.Errorf("composite without its query part: event_id %q, want the Idempotency-Key idem-zz-1", a["event_id"])
	}
	// Neither: the SHA-256 of the body, in hex.
	body2 := []byte(`{"no":"id"}`)
	sum := sha256.Sum256(body2)
	if a = mustAccept(t, "sha256 fallback")(postIngest(g, "zexpr", body2, nil)); a["event_id"] != hex.EncodeToString(sum[:]) {
		t.Errorf("fallback event_id %q, want sha256 hex %x", a["event_id"], sum)
	}
	// Arrays: /data/1/id, a number keeps its literal text.
	arr := []byte(`{"data":[{"id":"first","type":"no"},{"id":12345678901234567890,"type":"second.type"}]}`)
	a = mustAccept(t, "array index")(postIngest(g, "zarr", arr, nil))
	if a["event_id"] != "12345678901234567890" || schemeEvent(t, g, a["id"]).Type != "second.type" {
		t.Errorf("json:/data/1/id gave %q, type %q; want 12345678901234567890 and second.type", a["event_id"], schemeEvent(t, g, a["id"]).Type)
	}
	// An escaped member name in the body matches the pointer.
	esc := []byte(`{"a\/b":{"c\u007ed":"esc"}}`)
	if a = mustAccept(t, "escaped member names")(postIngest(g, "zexpr?acct=q", esc, nil)); a["event_id"] != "esc/q" {
		t.Errorf("JSON-escaped member names: event_id %q, want esc/q", a["event_id"])
	}
	// A query value is URL-decoded.
	if a = mustAccept(t, "query decoding")(postIngest(g, "zexpr?acct=a%2Fb%20c", []byte(`{"a/b":{"c~d":"v"}}`), nil)); a["event_id"] != "v/a/b c" {
		t.Errorf("query:acct of a%%2Fb%%20c: event_id %q, want \"v/a/b c\"", a["event_id"])
	}
}

// Dedupe: a provider retry signed anew (Stripe's next attempt has a new
// t=) is the same event: same status, byte-identical body, Replayed; a
// different body under the same ID is 422; dedupe ignores the query.
func TestIngestDedupeAcrossResignedRetries(t *testing.T) {
	g := startSchemesGateway(t)
	now := time.Now().Unix()
	body := []byte(`{"id":"evt_zz_d1","type":"charge.succeeded"}`)
	st, h1, first := postIngest(g, "zstripe", body, hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now-60, stripeV1Sig(secretStripeNew, now-60, body))))
	mustAccept(t, "first")(st, h1, first)
	st, h2, again := postIngest(g, "zstripe", body, hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeV1Sig(secretStripeOld, now, body))))
	if st != 202 || !bytes.Equal(again, first) || h2.Get(inbound.HeaderReplayed) != "true" || h2.Get("Content-Type") != h1.Get("Content-Type") {
		t.Errorf("Stripe retry: %d %s replayed=%q ct=%q, want 202 %s replayed=true ct=%q", st, again, h2.Get(inbound.HeaderReplayed), h2.Get("Content-Type"), first, h1.Get("Content-Type"))
	}
	other := []byte(`{"id":"evt_zz_d1","type":"charge.refunded"}`)
	st, h3, b := postIngest(g, "zstripe", other, hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeV1Sig(secretStripeNew, now, other))))
	if st != 422 || h3.Get(inbound.HeaderReplayed) != "" || !strings.HasSuffix(decodeProblem(t, h3, b).Type, "idempotency-key-reused") {
		t.Errorf("same id, other body: %d %s, want 422 idempotency-key-reused", st, b)
	}
	// A bad signature on a known event ID is still a 401, never the
	// stored answer (that would confirm the event to anybody).
	st, h4, b := postIngest(g, "zstripe", body, hdrs("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeV1Sig("whsec_forged", now, body))))
	mustRefuse(t, "forged retry of a known event", st, h4, b, nil)
	if n := countEvents(t, g); n != 1 {
		t.Errorf("%d events, want 1", n)
	}
}

// What is stored: the raw body byte for byte with its Content-Type, the
// provider's headers, never its credentials.
func TestIngestStoredEvent(t *testing.T) {
	g := startSchemesGateway(t)
	body := []byte("{ \"id\" : \"evt_zz_st\",\t\"type\":\"x\", \"note\":\"caf\u00e9 \\u00e9 \\/\" }\r\n")
	now := time.Now().Unix()
	req, _ := http.NewRequest("POST", "http://"+g.PublicAddr()+"/ingest/zstripe", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", now, stripeV1Sig(secretStripeNew, now, body)))
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Set("Authorization", "Bearer sk_live_zz_authorization")
	req.Header.Set("X-Api-Key", "zz-api-key-value")
	req.Header.Set("X-Webhook-Token", "zz-token-value")
	st, hdr, b := do(t, req)
	a := mustAccept(t, "stored event")(st, hdr, b)
	ev := schemeEvent(t, g, a["id"])
	if ev.Body == nil || *ev.Body != string(body) {
		t.Errorf("stored body %v, want the raw bytes %q", ev.Body, body)
	}
	if ev.ContentType != "application/json; charset=utf-8" {
		t.Errorf("stored content_type %q, want the request's", ev.ContentType)
	}
	if ev.Headers["User-Agent"] != "Stripe/1.0 (+https://stripe.com/docs/webhooks)" {
		t.Errorf("stored headers %v lack the provider's User-Agent", ev.Headers)
	}
	raw, _ := json.Marshal(ev)
	for _, s := range []string{"sk_live_zz_authorization", "zz-api-key-value", "zz-token-value", secretStripeNew, secretStripeOld} {
		if strings.Contains(string(raw), s) {
			t.Errorf("GET /events/{id} shows a credential %q: %s", s, raw)
		}
	}
}

// A source made through the admin API verifies at once, and a PATCH of
// its secrets (a rotation: new first, old kept, then old dropped) takes
// effect on the next request.
func TestIngestAdminSourceRotation(t *testing.T) {
	g := startSchemesGateway(t)
	must[admin.Source](t, 201)(g.api("POST", "/sources", acmeToken, jsonMap{"id": "zapi",
		"verify":   jsonMap{"scheme": "hmac", "secrets": []string{"old-zz-secret"}, "header": "X-Zz-Mac", "encoding": "base64", "prefix": "v1="},
		"event_id": "json:/id"}))
	sign := func(secret string, body []byte) http.Header {
		return hdrs("X-Zz-Mac", "v1="+base64.StdEncoding.EncodeToString(macOf(sha256.New, []byte(secret), body)))
	}
	b1 := []byte(`{"id":"api-1"}`)
	if a := mustAccept(t, "API source, its secret")(postIngest(g, "zapi", b1, sign("old-zz-secret", b1))); a["event_id"] != "api-1" {
		t.Errorf("API source event_id %q, want api-1", a["event_id"])
	}
	must[admin.Source](t, 200)(g.api("PATCH", "/sources/zapi", acmeToken, jsonMap{"verify": jsonMap{"secrets": []string{"new-zz-secret", "old-zz-secret"}}}))
	b2, b3 := []byte(`{"id":"api-2"}`), []byte(`{"id":"api-3"}`)
	mustAccept(t, "during rotation, new secret")(postIngest(g, "zapi", b2, sign("new-zz-secret", b2)))
	mustAccept(t, "during rotation, old secret")(postIngest(g, "zapi", b3, sign("old-zz-secret", b3)))
	must[admin.Source](t, 200)(g.api("PATCH", "/sources/zapi", acmeToken, jsonMap{"verify": jsonMap{"secrets": []string{"new-zz-secret"}}}))
	b4 := []byte(`{"id":"api-4"}`)
	h := sign("old-zz-secret", b4)
	st, rh, b := postIngest(g, "zapi", b4, h)
	mustRefuse(t, "old secret after it was dropped", st, rh, b, h)
	mustAccept(t, "after rotation, new secret")(postIngest(g, "zapi", b4, sign("new-zz-secret", b4)))
}

// Header names in any case on the wire, for the signature and for the
// expressions; an event ID with JSON-special characters comes back in a
// valid JSON answer; an unknown source and a wrong method are
// problem+json.
func TestIngestHeaderCaseAndAnswers(t *testing.T) {
	g := startSchemesGateway(t)
	now := time.Now().Unix()
	body := `{"type":"user.updated"}`
	idRaw := "msg_\"q\\<>"
	sig := swSig(testSecret, idRaw, now, []byte(body))
	raw := "POST /ingest/zsw HTTP/1.1\r\nHost: gw\r\nCONTENT-TYPE: application/json\r\nWEBHOOK-ID: " + idRaw +
		"\r\nWebHook-TimeStamp: " + fmt.Sprint(now) + "\r\nwebhook-SIGNATURE: " + sig +
		"\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	st, rh, b := rawRequest(t, g.PublicAddr(), raw)
	a := mustAccept(t, "standard webhooks with odd-case header names")(st, rh, b)
	if a["event_id"] != idRaw {
		t.Errorf("event_id %q, want %q (the answer must carry the provider's id as a JSON string)", a["event_id"], idRaw)
	}
	// Same request again: replayed, byte-identical.
	st, rh, b2 := rawRequest(t, g.PublicAddr(), raw)
	if st != 202 || !bytes.Equal(b, b2) || rh.Get(inbound.HeaderReplayed) != "true" {
		t.Errorf("replay: %d %s replayed=%q, want 202 %s", st, b2, rh.Get(inbound.HeaderReplayed), b)
	}
	// Expressions read headers whatever their case.
	raw = "POST /ingest/zexpr?acct=c HTTP/1.1\r\nHost: gw\r\ncontent-type: application/json\r\nx-zz-KIND: lower.kind" +
		"\r\nContent-Length: 20\r\nConnection: close\r\n\r\n" + `{"a/b":{"c~d":"lc"}}`
	st, rh, b = rawRequest(t, g.PublicAddr(), raw)
	a = mustAccept(t, "expression header in another case")(st, rh, b)
	if typ := schemeEvent(t, g, a["id"]).Type; typ != "lower.kind" {
		t.Errorf("header:X-Zz-Kind sent as x-zz-KIND gave type %q, want lower.kind", typ)
	}
	st, rh, b = postIngest(g, "zz-no-such-source", []byte(`{}`), nil)
	if st != 404 || decodeProblem(t, rh, b).Status != 404 {
		t.Errorf("unknown source: %d %s, want a 404 problem", st, b)
	}
	req, _ := http.NewRequest("PUT", "http://"+g.PublicAddr()+"/ingest/zsw", strings.NewReader("{}"))
	if st, rh, b := do(t, req); st != 405 || decodeProblem(t, rh, b).Status != 405 {
		t.Errorf("PUT: %d %s, want 405 problem", st, b)
	}
}

// A request without a Content-Type is stored without one (and is not
// given one the provider never sent).
func TestIngestNoContentType(t *testing.T) {
	g := startSchemesGateway(t)
	body := "id=form-1&x=y"
	raw := "POST /ingest/open HTTP/1.1\r\nHost: gw\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	st, rh, b := rawRequest(t, g.PublicAddr(), raw)
	a := mustAccept(t, "no content type")(st, rh, b)
	ev := schemeEvent(t, g, a["id"])
	if ev.ContentType != "" || ev.Headers["Content-Type"] != "" {
		t.Errorf("stored content_type %q, header %q; the provider sent none", ev.ContentType, ev.Headers["Content-Type"])
	}
	if ev.Body == nil || *ev.Body != body {
		t.Errorf("stored body %v, want %q", ev.Body, body)
	}
}

// More RFC 6901: "~01" is the member "~1" (not "/"), "/" alone is the
// member "" (the empty name), and the last of duplicate members wins, as
// encoding/json decides.
func TestIngestPointerCorners(t *testing.T) {
	g := startSchemesGateway(t)
	// json:/~01/ is member "~1" then member ""; the second part,
	// json:/, is member "" of the root.
	body := []byte(`{"/":{"":"slash"},"~1":{"":"tilde-one","x":1},"":"empty","~1":{"":"last-tilde-one"}}`)
	a := mustAccept(t, "pointer corners")(postIngest(g, "zptr", body, nil))
	if a["event_id"] != "last-tilde-one/empty" {
		t.Errorf(`json:/~01/+json:/ gave %q, want "last-tilde-one/empty" (~01 is "~1"; "/" is the empty member; last duplicate wins)`, a["event_id"])
	}
}

// Concurrent retries of one Standard Webhooks message, each signed anew
// (its own webhook-timestamp), are one event and all get the first answer.
func TestIngestConcurrentResignedRetries(t *testing.T) {
	g := startSchemesGateway(t)
	body := []byte(`{"type":"order.paid","n":1}`)
	now := time.Now().Unix()
	const n = 24
	codes, answers := make([]int, n), make([]string, n)
	done := make(chan struct{}, n)
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			ts := now - int64(i)
			h := hdrs("webhook-id", "msg_conc", "webhook-timestamp", fmt.Sprint(ts), "webhook-signature", swSig(testSecret, "msg_conc", ts, body))
			req, _ := http.NewRequest("POST", "http://"+g.PublicAddr()+"/ingest/zsw", bytes.NewReader(body))
			req.Header = h
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			buf.ReadFrom(resp.Body)
			codes[i], answers[i] = resp.StatusCode, buf.String()
		}()
	}
	for range n {
		<-done
	}
	for i := range n {
		if codes[i] != 202 || answers[i] != answers[0] {
			t.Errorf("retry %d: %d %s, want 202 and the first answer %s", i, codes[i], answers[i], answers[0])
		}
	}
	if c := countEvents(t, g); c != 1 {
		t.Errorf("%d events stored for one message, want exactly 1", c)
	}
}

// A signed body sent chunked (a client that streams it) is verified,
// identified and stored as the de-chunked bytes.
func TestIngestChunkedSignedBody(t *testing.T) {
	g := startSchemesGateway(t)
	body := []byte(`{"id":"evt_zz_chunked","type":"invoice.created","pad":"` + strings.Repeat("p", 1500) + `"}`)
	now := time.Now().Unix()
	raw := "POST /ingest/zstripe HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n" +
		"Stripe-Signature: " + fmt.Sprintf("t=%d,v1=%s", now, stripeV1Sig(secretStripeNew, now, body)) + "\r\n\r\n" + chunkedAs(string(body), 100)
	st, rh, b := rawRequest(t, g.PublicAddr(), raw)
	a := mustAccept(t, "chunked signed body")(st, rh, b)
	if ev := schemeEvent(t, g, a["id"]); a["event_id"] != "evt_zz_chunked" || ev.Body == nil || *ev.Body != string(body) {
		t.Errorf("chunked: event_id %q, stored body matches: %v", a["event_id"], ev.Body != nil && *ev.Body == string(body))
	}
}
