package gateway

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"hookgate/inbound"
)

// Each provider's own retry or redelivery, as its documentation
// describes it, against a running gateway. Signatures are computed here with
// crypto/hmac, the way each provider's documentation says, not with the
// gateway's code. A retry must be the same event (202, Idempotent-Replayed,
// the first answer byte for byte); what the provider documents as another
// delivery must be another event.

const (
	provGitHubSecret  = "It's a Secret to Everybody"
	provShopifySecret = "shpss_providers"
	provSlackSecret   = "8f742231b10e8888abcd99yyyzzz85a5"
	provStripeSecret  = "whsec_providers_new"
	provStripeOld     = "whsec_providers_old"
)

func provConfig() string {
	return fmt.Sprintf(`  - id: gh
    tenant: acme
    verify: {scheme: github, secrets: [%q]}
  - id: shop
    tenant: acme
    verify: {scheme: shopify, secrets: [%q]}
  - id: slack
    tenant: acme
    verify: {scheme: slack, secrets: [%q]}
  - id: stripe
    tenant: acme
    verify: {scheme: stripe, secrets: [%q, %q]}
`, provGitHubSecret, provShopifySecret, provSlackSecret, provStripeSecret, provStripeOld)
}

func provHex(key, msg string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return fmt.Sprintf("%x", m.Sum(nil))
}

// provPost posts body to source with exactly the given headers (no default
// Content-Type), so form-encoded deliveries go out as providers send them.
func provPost(t *testing.T, g *gw, source string, body []byte, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+g.PublicAddr()+"/ingest/"+source, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return do(t, req)
}

// provAnswer checks one answer: its status, and whether it is a replay.
func provAnswer(t *testing.T, what string, st int, hdr http.Header, b []byte, replayed bool) {
	t.Helper()
	if st != 202 {
		t.Fatalf("%s: %d %s, want 202", what, st, b)
	}
	if got := hdr.Get(inbound.HeaderReplayed) == "true"; got != replayed {
		t.Fatalf("%s: Idempotent-Replayed=%q, want replayed=%v (%s)", what, hdr.Get(inbound.HeaderReplayed), replayed, b)
	}
}

// TestProviderRetriesAreOneEvent (a passing check, kept: nothing
// sent a provider's retry through the gateway for GitHub, Slack or Shopify).
func TestProviderRetriesAreOneEvent(t *testing.T) {
	g := startGateway(t, gwOptions{extra: provConfig()})
	events := 0

	t.Run("github", func(t *testing.T) {
		// docs.github.com: a redelivery carries the X-GitHub-Delivery of the
		// original; the GUID is per event, shared by every hook it reaches.
		body := []byte(`{"zen":"Keep it logically awesome.","hook_id":109948940}`)
		hdr := map[string]string{
			"Content-Type":        "application/json",
			"X-GitHub-Event":      "ping",
			"X-GitHub-Delivery":   "72d3162e-cc78-11e3-81ab-4c9367dc0958",
			"X-GitHub-Hook-ID":    "109948940",
			"X-Hub-Signature-256": "sha256=" + provHex(provGitHubSecret, string(body)),
			"User-Agent":          "GitHub-Hookshot/044aadd",
		}
		st, h, first := provPost(t, g, "gh", body, hdr)
		provAnswer(t, "ping", st, h, first, false)
		events++
		st, h, again := provPost(t, g, "gh", body, hdr)
		provAnswer(t, "redelivery", st, h, again, true)
		if !bytes.Equal(first, again) {
			t.Fatalf("redelivery answered %s, first answer %s", again, first)
		}
		// The same event reaching a second hook: same GUID, another hook id.
		other := []byte(`{"zen":"Keep it logically awesome.","hook_id":109948941}`)
		hdr2 := map[string]string{
			"Content-Type":        "application/json",
			"X-GitHub-Event":      "ping",
			"X-GitHub-Delivery":   hdr["X-GitHub-Delivery"],
			"X-GitHub-Hook-ID":    "109948941",
			"X-Hub-Signature-256": "sha256=" + provHex(provGitHubSecret, string(other)),
		}
		st, h, b := provPost(t, g, "gh", other, hdr2)
		provAnswer(t, "second hook", st, h, b, false)
		events++
		// A webhook set to application/x-www-form-urlencoded: signed over the
		// raw form body.
		form := []byte("payload=%7B%22ref%22%3A%22refs%2Fheads%2Fmain%22%7D")
		st, h, b = provPost(t, g, "gh", form, map[string]string{
			"Content-Type":        "application/x-www-form-urlencoded",
			"X-GitHub-Event":      "push",
			"X-GitHub-Delivery":   "0b989ba4-242f-11e5-81e1-c7b6966d2516",
			"X-GitHub-Hook-ID":    "109948940",
			"X-Hub-Signature-256": "sha256=" + provHex(provGitHubSecret, string(form)),
		})
		provAnswer(t, "form-encoded push", st, h, b, false)
		events++
	})

	t.Run("slack", func(t *testing.T) {
		// Slack retries (X-Slack-Retry-Num) carry the same event_id, signed
		// again with the time of the retry.
		body := []byte(`{"token":"z26uFbvR1xHJEdHE1OQiO6t8","team_id":"T061EG9RZ","api_app_id":"A0FFV41KK",` +
			`"event":{"type":"reaction_added","user":"U061F1EUR","reaction":"slightly_smiling_face"},` +
			`"type":"event_callback","event_id":"Ev9UQ52YNA","event_time":1234567890}`)
		sign := func(ts time.Time, b []byte) map[string]string {
			return map[string]string{
				"Content-Type":              "application/json",
				"X-Slack-Request-Timestamp": fmt.Sprint(ts.Unix()),
				"X-Slack-Signature":         "v0=" + provHex(provSlackSecret, fmt.Sprintf("v0:%d:%s", ts.Unix(), b)),
			}
		}
		st, h, first := provPost(t, g, "slack", body, sign(time.Now().Add(-61*time.Second), body))
		provAnswer(t, "event_callback", st, h, first, false)
		events++
		retry := sign(time.Now(), body)
		retry["X-Slack-Retry-Num"] = "1"
		retry["X-Slack-Retry-Reason"] = "http_timeout"
		st, h, again := provPost(t, g, "slack", body, retry)
		provAnswer(t, "retry", st, h, again, true)
		if !bytes.Equal(first, again) || !strings.Contains(string(first), `"event_id":"Ev9UQ52YNA"`) {
			t.Fatalf("retry answered %s, first answer %s", again, first)
		}
		// An interactive payload: form-encoded, signed over the raw body.
		form := []byte("payload=%7B%22type%22%3A%22block_actions%22%2C%22trigger_id%22%3A%2212466734323.1395872398%22%7D")
		hdr := sign(time.Now(), form)
		hdr["Content-Type"] = "application/x-www-form-urlencoded"
		st, h, b := provPost(t, g, "slack", form, hdr)
		provAnswer(t, "interactive payload", st, h, b, false)
		events++
		stored := false
		for _, e := range eventsIn(t, g.Store()) {
			if bytes.Equal(e.Body, form) && e.ContentType == "application/x-www-form-urlencoded" {
				stored = true
			}
		}
		if !stored {
			t.Fatal("the form-encoded interactive payload was not stored byte for byte with its Content-Type")
		}
	})

	t.Run("shopify", func(t *testing.T) {
		// shopify.dev, "Webhooks delivery structure": X-Shopify-Webhook-Id is
		// per delivery (a retry keeps it); X-Shopify-Event-Id is shared by
		// every delivery of one merchant action, one per subscription.
		body := []byte(`{"id":820982911946154508,"email":"jon@example.com","total_price":"199.65"}` + "\n")
		sign := func(webhookID string) map[string]string {
			m := hmac.New(sha256.New, []byte(provShopifySecret))
			m.Write(body)
			return map[string]string{
				"Content-Type":           "application/json",
				"X-Shopify-Topic":        "orders/create",
				"X-Shopify-Hmac-Sha256":  base64.StdEncoding.EncodeToString(m.Sum(nil)),
				"X-Shopify-Shop-Domain":  "example.myshopify.com",
				"X-Shopify-API-Version":  "2026-04",
				"X-Shopify-Webhook-Id":   webhookID,
				"X-Shopify-Event-Id":     "98880550-7158-44d4-b7cd-2c97c8a091b5",
				"X-Shopify-Triggered-At": "2026-12-01T10:00:00.000000000Z",
			}
		}
		st, h, first := provPost(t, g, "shop", body, sign("b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"))
		provAnswer(t, "orders/create", st, h, first, false)
		events++
		st, h, again := provPost(t, g, "shop", body, sign("b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"))
		provAnswer(t, "retry", st, h, again, true)
		if !bytes.Equal(first, again) {
			t.Fatalf("retry answered %s, first answer %s", again, first)
		}
		st, h, b := provPost(t, g, "shop", body, sign("0d87a9a0-6a4c-4bd5-9a3b-1e1e0c9c2f11"))
		provAnswer(t, "second subscription", st, h, b, false)
		events++
	})

	t.Run("stripe", func(t *testing.T) {
		// During a secret roll Stripe sends one v1 per live secret, and a v0
		// in test mode; each retry is signed again with a new t.
		body := []byte(`{"id":"evt_1R41aBcDeFgHiJ","object":"event","type":"invoice.paid","pending_webhooks":1}`)
		sign := func(ts time.Time) string {
			t := fmt.Sprint(ts.Unix())
			return "t=" + t + ",v1=" + provHex(provStripeOld, t+"."+string(body)) +
				",v1=" + provHex("whsec_unknown", t+"."+string(body)) + ",v0=" + provHex("legacy", t+"."+string(body))
		}
		hdr := map[string]string{"Content-Type": "application/json; charset=utf-8", "Stripe-Signature": sign(time.Now().Add(-4 * time.Minute))}
		st, h, first := provPost(t, g, "stripe", body, hdr)
		provAnswer(t, "event", st, h, first, false)
		events++
		hdr["Stripe-Signature"] = sign(time.Now())
		st, h, again := provPost(t, g, "stripe", body, hdr)
		provAnswer(t, "retry", st, h, again, true)
	})

	t.Run("standard-webhooks", func(t *testing.T) {
		// A sender signing with an asymmetric key too lists a v1a entry
		// beside v1; a verifier with a symmetric secret skips it. Svix's
		// header names; the retry is signed again, with the same id.
		body := []byte(`{"type":"user.created","data":{"id":"u_1"}}`)
		_, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		hdr := func(ts time.Time) map[string]string {
			s := signSW("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, body)
			v1a := base64.StdEncoding.EncodeToString(ed25519.Sign(priv, []byte(fmt.Sprintf("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W.%d.%s", ts.Unix(), body))))
			return map[string]string{
				"Content-Type":   "application/json",
				"svix-id":        s["webhook-id"],
				"svix-timestamp": s["webhook-timestamp"],
				"svix-signature": "v1a," + v1a + " " + s["webhook-signature"],
			}
		}
		st, h, first := provPost(t, g, "sw", body, hdr(time.Now().Add(-time.Minute)))
		provAnswer(t, "message", st, h, first, false)
		events++
		if !strings.Contains(string(first), `"event_id":"msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"`) {
			t.Fatalf("answer %s, want the svix-id as event_id", first)
		}
		st, h, again := provPost(t, g, "sw", body, hdr(time.Now()))
		provAnswer(t, "retry", st, h, again, true)
	})

	if got := len(eventsIn(t, g.Store())); got != events {
		t.Fatalf("%d events stored, want %d", got, events)
	}
}
