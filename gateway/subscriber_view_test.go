package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/internal/testsupport"
)

// Secrets of the subscriber tests (whsec_ + base64 of 32 bytes).
var (
	subSecretA = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xA1}, 32))
	subSecretB = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xB2}, 32))
	subSecretC = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xC3}, 32))
)

// subEndpointConfig is the config of endpoint e53, subscribed to source
// open and sending to r with secret subSecretA.
func subEndpointConfig(r *receiver) string {
	return fmt.Sprintf(`
endpoints:
  - id: e53
    tenant: acme
    url: %s/hooks
    secret: %s
    sources: [open]
`, r.srv.URL, subSecretA)
}

// subVerify is a Standard Webhooks verifier written from the specification
// (not from hookgate's signing code): it returns the secrets, among
// secrets, whose v1 signature is in the webhook-signature header of the
// request, for "<webhook-id>.<webhook-timestamp>.<body>".
func subVerify(t *testing.T, h http.Header, body []byte, secrets ...string) []string {
	t.Helper()
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		t.Fatalf("a Standard Webhooks header is missing: id %q ts %q sig %q", id, ts, sigs)
	}
	var got [][]byte
	for _, s := range strings.Split(sigs, " ") {
		v, b64, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			t.Fatalf("webhook-signature entry %q is not v1,<base64>", s)
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatalf("webhook-signature entry %q: %v", s, err)
		}
		got = append(got, raw)
	}
	var ok []string
	for _, secret := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil {
			t.Fatal(err)
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		want := mac.Sum(nil)
		for _, g := range got {
			if hmac.Equal(g, want) {
				ok = append(ok, secret)
				break
			}
		}
	}
	if len(ok) != len(got) {
		t.Errorf("webhook-signature %q holds %d signatures, %d of them verify with a known secret", sigs, len(got), len(ok))
	}
	return ok
}

// subCheck checks one delivered request against SPEC section 4: the
// same key in Idempotency-Key and webhook-id, a timestamp of this attempt,
// the body and Content-Type as the provider sent them, the static
// header, the gateway's headers, no provider header leaked.
func subCheck(t *testing.T, what string, q recorded, key string, body []byte, ct string) {
	t.Helper()
	h := q.header
	if got := h.Get("Idempotency-Key"); got != key || h.Get("webhook-id") != key {
		t.Errorf("%s: Idempotency-Key %q, webhook-id %q, want both %q", what, got, h.Get("webhook-id"), key)
	}
	ts, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	if err != nil {
		t.Errorf("%s: webhook-timestamp %q", what, h.Get("webhook-timestamp"))
	} else if d := q.at.Sub(time.Unix(ts, 0)); d < -time.Second || d > 2*time.Second {
		t.Errorf("%s: webhook-timestamp %d is %v away from the attempt (received %v)", what, ts, d, q.at)
	}
	if !bytes.Equal(q.body, body) {
		t.Errorf("%s: body %q, want %q", what, q.body, body)
	}
	if got := h.Get("Content-Type"); got != ct {
		t.Errorf("%s: Content-Type %q, want %q", what, got, ct)
	}
	if h.Get("X-Team") != "billing" {
		t.Errorf("%s: static header X-Team %q", what, h.Get("X-Team"))
	}
	if h.Get("hookgate-source") != "sw" || h.Get("hookgate-event-type") != "invoice.paid" {
		t.Errorf("%s: hookgate-source %q, hookgate-event-type %q", what, h.Get("hookgate-source"), h.Get("hookgate-event-type"))
	}
	if !strings.HasPrefix(h.Get("User-Agent"), "hookgate/") {
		t.Errorf("%s: User-Agent %q", what, h.Get("User-Agent"))
	}
	if n, err := strconv.Atoi(h.Get("hookgate-attempt")); err != nil || n < 1 {
		t.Errorf("%s: hookgate-attempt %q", what, h.Get("hookgate-attempt"))
	}
	for _, name := range []string{"Stripe-Signature", "X-Hub-Signature-256", "Authorization", "Cookie", "X-Provider-Secret"} {
		if v := h.Get(name); v != "" {
			t.Errorf("%s: the provider's %s reached the subscriber: %q", what, name, v)
		}
	}
}

// TestSubscriberSeesSpecHeadersOnEveryResend follows one event
// through every way hookgate sends it again and checks each request at
// the subscriber with an independent Standard Webhooks verifier.
func TestSubscriberSeesSpecHeadersOnEveryResend(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	rcv.failNext(2) // two automatic retries before the first 200
	extra := fmt.Sprintf(`
endpoints:
  - id: e53
    tenant: acme
    url: %s/hooks
    secret: %s
    headers: {X-Team: billing}
`, rcv.srv.URL, subSecretA)
	g := startGateway(t, gwOptions{extra: extra})

	// Odd whitespace, unicode escapes and raw UTF-8 in a JSON body.
	body := []byte("{ \"type\" :\t\"invoice.paid\",\n  \"name\": \"caf\\u00e9 \\ud83d\\ude00 é\" ,\"n\":1.50E+2 }\n")
	hdr := signSW("msg_provider_53", time.Now(), body)
	hdr["Stripe-Signature"] = "t=1,v1=deadbeef"
	hdr["X-Hub-Signature-256"] = "sha256=deadbeef"
	hdr["Authorization"] = "Bearer provider-credential"
	hdr["Cookie"] = "session=provider"
	hdr["X-Provider-Secret"] = "s3cr3t"
	hdr["Content-Type"] = "application/json; charset=utf-8"
	const ct = "application/json; charset=utf-8"
	st, _, ans := g.post("sw", body, hdr)
	if st != 202 {
		t.Fatalf("ingest: %d %s", st, ans)
	}
	var acc struct{ ID string }
	_ = json.Unmarshal(ans, &acc)

	testsupport.WaitFor(t, 10*time.Second, "3 attempts", func() bool { return rcv.count() >= 3 })
	reqs := rcv.all()
	key := reqs[0].header.Get("Idempotency-Key")
	if !strings.HasPrefix(key, "msg_") {
		t.Fatalf("Idempotency-Key %q", key)
	}
	for i, q := range reqs[:3] {
		subCheck(t, fmt.Sprintf("automatic attempt %d", i+1), q, key, body, ct)
		if got := subVerify(t, q.header, q.body, subSecretA); len(got) != 1 {
			t.Errorf("automatic attempt %d: signature does not verify with the endpoint's secret", i+1)
		}
		if q.header.Get("hookgate-attempt") != strconv.Itoa(i+1) {
			t.Errorf("automatic attempt %d: hookgate-attempt %q", i+1, q.header.Get("hookgate-attempt"))
		}
	}

	// The delivery.
	ev := must[jsonMap](t, 200)(g.api("GET", "/events/"+acc.ID, opToken, nil))
	dls := ev["deliveries"].([]any)
	if len(dls) != 1 {
		t.Fatalf("deliveries %v", dls)
	}
	dlv := dls[0].(jsonMap)["id"].(string)
	testsupport.WaitFor(t, 5*time.Second, "succeeded", func() bool {
		d := must[jsonMap](t, 200)(g.api("GET", "/deliveries/"+dlv, opToken, nil))
		return d["state"] == "succeeded"
	})

	next := func(what string, n int) recorded {
		t.Helper()
		testsupport.WaitFor(t, 10*time.Second, what, func() bool { return rcv.count() >= n })
		return rcv.all()[n-1]
	}
	n := 3

	// Manual retry.
	must[jsonMap](t, 202)(g.api("POST", "/deliveries/"+dlv+"/retry", opToken, nil))
	n++
	q := next("manual retry", n)
	subCheck(t, "manual retry", q, key, body, ct)
	if len(subVerify(t, q.header, q.body, subSecretA)) != 1 {
		t.Errorf("manual retry: signature")
	}

	// Single-event replay.
	must[jsonMap](t, 202)(g.api("POST", "/events/"+acc.ID+"/replay", opToken, nil))
	n++
	q = next("event replay", n)
	subCheck(t, "event replay", q, key, body, ct)
	if len(subVerify(t, q.header, q.body, subSecretA)) != 1 {
		t.Errorf("event replay: signature")
	}
	if q.header.Get("hookgate-attempt") != "1" {
		t.Errorf("event replay: hookgate-attempt %q, want 1 (a new delivery)", q.header.Get("hookgate-attempt"))
	}

	// Bulk replay.
	must[jsonMap](t, 202)(g.api("POST", "/replays", opToken, map[string]any{"source": "sw"}))
	n++
	q = next("bulk replay", n)
	subCheck(t, "bulk replay", q, key, body, ct)
	if len(subVerify(t, q.header, q.body, subSecretA)) != 1 {
		t.Errorf("bulk replay: signature")
	}

	// Restart, then retry.
	g = g.restart(gwOptions{extra: extra})
	testsupport.WaitFor(t, 5*time.Second, "settled", func() bool {
		d := must[admin.List[jsonMap]](t, 200)(g.api("GET", "/deliveries?status=pending", opToken, nil))
		return len(d.Data) == 0
	})
	must[jsonMap](t, 202)(g.api("POST", "/deliveries/"+dlv+"/retry", opToken, nil))
	n++
	q = next("retry after restart", n)
	subCheck(t, "retry after restart", q, key, body, ct)
	if len(subVerify(t, q.header, q.body, subSecretA)) != 1 {
		t.Errorf("retry after restart: signature")
	}
	firstTS := reqs[0].header.Get("webhook-timestamp")

	// Rotation with a grace period: both secrets sign.
	rot := must[jsonMap](t, 200)(g.api("POST", "/endpoints/e53/rotate-secret", opToken, map[string]any{"secret": subSecretB, "grace": "3s"}))
	if rot["secret"] != subSecretB {
		t.Fatalf("rotate: secret %v", rot["secret"])
	}
	graceEnds := time.Now().Add(3 * time.Second)
	must[jsonMap](t, 202)(g.api("POST", "/deliveries/"+dlv+"/retry", opToken, nil))
	n++
	q = next("retry in grace", n)
	subCheck(t, "retry in grace", q, key, body, ct)
	if got := subVerify(t, q.header, q.body, subSecretA, subSecretB); len(got) != 2 {
		t.Errorf("retry in grace: verified with %d of the old and new secret, want both (%q)", len(got), q.header.Get("webhook-signature"))
	}

	// Restart inside the grace: both still sign.
	g = g.restart(gwOptions{extra: strings.Replace(extra, subSecretA, subSecretB, 1)})
	must[jsonMap](t, 202)(g.api("POST", "/events/"+acc.ID+"/replay", opToken, nil))
	n++
	q = next("replay in grace after restart", n)
	if time.Now().Before(graceEnds) {
		subCheck(t, "replay in grace after restart", q, key, body, ct)
		if got := subVerify(t, q.header, q.body, subSecretA, subSecretB); len(got) != 2 {
			t.Errorf("replay in grace after restart: verified with %d secrets, want 2 (%q)", len(got), q.header.Get("webhook-signature"))
		}
	}

	// After the grace: only the new secret.
	testsupport.WaitFor(t, 10*time.Second, "the grace to end", func() bool { return time.Now().After(graceEnds.Add(1100 * time.Millisecond)) })
	must[jsonMap](t, 202)(g.api("POST", "/deliveries/"+dlv+"/retry", opToken, nil))
	n++
	q = next("retry after grace", n)
	subCheck(t, "retry after grace", q, key, body, ct)
	if got := subVerify(t, q.header, q.body, subSecretA, subSecretB); len(got) != 1 || got[0] != subSecretB {
		t.Errorf("retry after grace: verified with %v, want only the new secret (%q)", got, q.header.Get("webhook-signature"))
	}
	if q.header.Get("webhook-timestamp") == firstTS {
		t.Errorf("retry after grace carries the first attempt's timestamp %s", firstTS)
	}

	// A rotation with grace 0: only the newest secret at once.
	must[jsonMap](t, 200)(g.api("POST", "/endpoints/e53/rotate-secret", opToken, map[string]any{"secret": subSecretC, "grace": "0s"}))
	must[jsonMap](t, 202)(g.api("POST", "/deliveries/"+dlv+"/retry", opToken, nil))
	n++
	q = next("retry after grace-0 rotation", n)
	if got := subVerify(t, q.header, q.body, subSecretA, subSecretB, subSecretC); len(got) != 1 || got[0] != subSecretC {
		t.Errorf("retry after grace-0 rotation: verified with %v, want only the newest secret", got)
	}
	if rcv.count() != n {
		t.Errorf("the subscriber got %d requests, want %d", rcv.count(), n)
	}

	// The original delivery's attempts, as recorded, are the requests
	// the subscriber got with its hookgate-attempt numbers and timestamps.
	testsupport.WaitFor(t, 5*time.Second, "the last attempt recorded", func() bool {
		d := must[jsonMap](t, 200)(g.api("GET", "/deliveries/"+dlv, opToken, nil))
		return d["state"] == "succeeded" && int(d["attempt_count"].(float64)) == 8
	})
	d := must[struct {
		Attempts []admin.Attempt `json:"attempts"`
	}](t, 200)(g.api("GET", "/deliveries/"+dlv, opToken, nil))
	var sent []recorded // the original delivery's requests: all but the two replays' and the bulk replay's
	for i, q := range rcv.all() {
		if i == 4 || i == 5 || i == 8 {
			continue
		}
		sent = append(sent, q)
	}
	if len(d.Attempts) != len(sent) {
		t.Fatalf("%d attempts recorded, the subscriber got %d requests of the delivery", len(d.Attempts), len(sent))
	}
	for i, a := range d.Attempts {
		at, _ := time.Parse(time.RFC3339Nano, a.At)
		q := sent[i]
		if q.header.Get("hookgate-attempt") != strconv.Itoa(a.N) || a.N != i+1 {
			t.Errorf("attempt %d recorded as n=%d, the request said hookgate-attempt %q", i+1, a.N, q.header.Get("hookgate-attempt"))
		}
		if q.header.Get("webhook-timestamp") != strconv.FormatInt(at.Unix(), 10) {
			t.Errorf("attempt %d at %s, the request's webhook-timestamp %q", a.N, a.At, q.header.Get("webhook-timestamp"))
		}
	}
}

// TestSubscriberGetsTheProvidersBodyByteForByte: whatever the
// provider posted (JSON with odd whitespace and escapes, bytes that are
// not UTF-8, a form, a multipart body, nothing, the largest body
// max_body allows) reaches the subscriber byte for byte, with the
// Content-Type as sent, and a signature over exactly those bytes.
func TestSubscriberGetsTheProvidersBodyByteForByte(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: subEndpointConfig(rcv), config: func(c *config.Config) { c.Server.MaxBody = 1 << 20 }})

	big := make([]byte, 1<<20)
	seed := uint64(53)
	for i := range big { // incompressible, not UTF-8
		seed = seed*6364136223846793005 + 1442695040888963407
		big[i] = byte(seed >> 56)
	}
	mp := "--XyZ-53\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n" +
		"--XyZ-53\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n\xff\x00\xfe\r\n" +
		"--XyZ-53--\r\n"
	cases := []struct {
		name, ct string
		body     []byte
	}{
		{"json", "application/json", []byte("{\"id\":\"j53\" , \"s\":\"\\u00e9\\u0000\\\"\\/\",\n\t\"e\":\"\u00e9\"}\r\n  ")},
		{"not utf-8", "application/octet-stream", []byte("\xff\xfe\x00\x80abc\xc3")},
		{"json not utf-8", "application/json", []byte("{\"id\":\"nu53\",\"v\":\"caf\xe9\"}")},
		{"form", "application/x-www-form-urlencoded", []byte("a=1&b=%C3%A9+x&c=&d=%FF")},
		{"multipart", "multipart/form-data; boundary=XyZ-53", []byte(mp)},
		{"odd content-type", "Application/JSON ;Charset=\"UTF-8\"", []byte(`{"id":"ct53"}`)},
		{"empty", "application/json", []byte{}},
		{"max body", "application/octet-stream", big},
	}
	want := map[string]int{}
	g = g.restart(gwOptions{extra: subEndpointConfig(rcv), config: func(c *config.Config) { c.Server.MaxBody = 1 << 20 }})
	for i, c := range cases {
		req, err := http.NewRequest("POST", "http://"+g.PublicAddr()+"/ingest/open", bytes.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", c.ct)
		st, _, ans := do(t, req)
		if st != 202 {
			t.Errorf("%s: ingest %d %s", c.name, st, ans)
			continue
		}
		want[string(c.body)] = i
	}
	testsupport.WaitFor(t, 20*time.Second, "every delivery", func() bool { return rcv.count() >= len(want) })
	for _, q := range rcv.all() {
		i, ok := want[string(q.body)]
		if !ok {
			t.Errorf("the subscriber got a body nobody sent (%d bytes, %q...)", len(q.body), q.body[:min(len(q.body), 64)])
			continue
		}
		delete(want, string(q.body))
		c := cases[i]
		if got := q.header.Get("Content-Type"); got != c.ct {
			t.Errorf("%s: Content-Type %q, want %q", c.name, got, c.ct)
		}
		if len(subVerify(t, q.header, q.body, subSecretA)) != 1 {
			t.Errorf("%s: signature does not verify", c.name)
		}
	}
	for _, i := range want {
		t.Errorf("%s: never delivered as sent", cases[i].name)
	}

	// Again from the store, after a restart: a bulk replay of every event.
	first := rcv.count()
	g = g.restart(gwOptions{extra: subEndpointConfig(rcv), config: func(c *config.Config) { c.Server.MaxBody = 1 << 20 }})
	must[jsonMap](t, 202)(g.api("POST", "/replays", opToken, map[string]any{"source": "open"}))
	testsupport.WaitFor(t, 20*time.Second, "every replayed delivery", func() bool { return rcv.count() >= 2*first })
	again := map[string]bool{}
	for _, q := range rcv.all()[first:] {
		again[string(q.body)] = true
		found := false
		for _, c := range cases {
			if bytes.Equal(c.body, q.body) {
				found = true
				if got := q.header.Get("Content-Type"); got != c.ct {
					t.Errorf("%s replayed: Content-Type %q, want %q", c.name, got, c.ct)
				}
			}
		}
		if !found {
			t.Errorf("replayed: a body nobody sent (%d bytes)", len(q.body))
		}
		if len(subVerify(t, q.header, q.body, subSecretA)) != 1 {
			t.Errorf("replayed: signature does not verify")
		}
	}
	for _, c := range cases {
		if !again[string(c.body)] {
			t.Errorf("%s: not replayed as sent", c.name)
		}
	}
}

// TestPublishedPayloadReachesTheSubscriberAsWritten: an event
// published through POST /events reaches the subscriber with its payload
// exactly as written in the request (whitespace, escapes, <&>), as
// application/json, signed over those bytes.
func TestPublishedPayloadReachesTheSubscriberAsWritten(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: subEndpointConfig(rcv)})
	payload := "{ \"id\" : \"pub53\",\n\t\"a\" : \"\\u00e9<&>\u00e9\" ,\"b\":[1, 2.50 ] , \"c\": null }"
	req := `{"source":"open","type":"t.53","payload":` + payload + `}`
	must[jsonMap](t, 202)(g.api("POST", "/events", opToken, req))
	testsupport.WaitFor(t, 5*time.Second, "the delivery", func() bool { return rcv.count() == 1 })
	q := rcv.all()[0]
	if string(q.body) != payload {
		t.Errorf("delivered %q, published %q", q.body, payload)
	}
	if ct := q.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if q.header.Get("hookgate-event-type") != "t.53" || q.header.Get("hookgate-source") != "open" {
		t.Errorf("hookgate headers %v", q.header)
	}
	if len(subVerify(t, q.header, q.body, subSecretA)) != 1 {
		t.Errorf("signature does not verify")
	}
}
