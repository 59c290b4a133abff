package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

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
	waitFor(t, 10*time.Second, "both deliveries", func() bool { return rcv.count() >= 2 })
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
		if st, hdr, b := g.post("stripe", body, map[string]string{"Stripe-Signature": both}); st != 202 || hdr.Get(headerReplayed) != "true" {
			t.Fatalf("round %d: retry with both v1: %d %s replayed=%q", round, st, b, hdr.Get(headerReplayed))
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
