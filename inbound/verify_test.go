package inbound

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The signers below are written against crypto/hmac directly, not against the code under
// test, so a test checks the scheme rather than echoing the implementation.

func macOf(newHash func() hash.Hash, key []byte, msg string) []byte {
	m := hmac.New(newHash, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

func hexMAC(key, msg string) string { return hex.EncodeToString(macOf(sha256.New, []byte(key), msg)) }

func b64MAC(key []byte, msg string) string {
	return base64.StdEncoding.EncodeToString(macOf(sha256.New, key, msg))
}

// testNow is the clock of every timestamped test: whole seconds, long after 1970.
var testNow = time.Unix(1_700_000_000, 0)

func unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// headers builds an http.Header from name, value pairs.
func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// verifyCase is one request and the outcome Verify must give: nil or the sentinel wrapped.
type verifyCase struct {
	name   string
	header http.Header
	body   string
	now    time.Time // zero: testNow
	want   error
}

// runVerifyCases checks each case and, for every error, that it wraps exactly one sentinel
// and repeats none of the given secrets or signatures.
func runVerifyCases(t *testing.T, cfg VerifyConfig, cases []verifyCase, private ...string) {
	t.Helper()
	v, err := NewVerifier(cfg)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = testNow
			}
			err := v.Verify(tc.header, []byte(tc.body), now)
			checkVerifyError(t, err, tc.want, append(private, cfg.Secrets...)...)
		})
	}
}

func checkVerifyError(t *testing.T, err, want error, private ...string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("Verify = %v, want nil", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("Verify = %v, want an error wrapping %v", err, want)
	}
	n := 0
	for _, s := range []error{ErrMissingSignature, ErrBadSignature, ErrStaleTimestamp} {
		if errors.Is(err, s) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("Verify = %v wraps %d sentinels, want 1", err, n)
	}
	for _, p := range private {
		if p != "" && strings.Contains(err.Error(), p) {
			t.Errorf("Verify error %q leaks %q", err, p)
		}
	}
}

func TestVerifyGitHub(t *testing.T) {
	// docs.github.com, "Validating webhook deliveries".
	const (
		secret = "It's a Secret to Everybody"
		body   = "Hello, World!"
		sig    = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	)
	const hdr = "X-Hub-Signature-256"
	other := hexMAC("another secret", body)
	if got := hexMAC(secret, body); got != sig {
		t.Fatalf("test signer disagrees with GitHub's example: %s", got)
	}
	cases := []verifyCase{
		{"published example", headers(hdr, "sha256="+sig), body, time.Time{}, nil},
		{"lower-case header name", headers("x-hub-signature-256", "sha256="+sig), body, time.Time{}, nil},
		{"upper-case hex", headers(hdr, "sha256="+strings.ToUpper(sig)), body, time.Time{}, nil},
		{"signed with another secret", headers(hdr, "sha256="+other), body, time.Time{}, ErrBadSignature},
		{"tampered body", headers(hdr, "sha256="+sig), body + " ", time.Time{}, ErrBadSignature},
		{"no header", headers(), body, time.Time{}, ErrMissingSignature},
		{"empty header", headers(hdr, ""), body, time.Time{}, ErrMissingSignature},
		{"only the legacy sha1 header", headers("X-Hub-Signature", "sha1="+sig), body, time.Time{}, ErrMissingSignature},
		{"no prefix", headers(hdr, sig), body, time.Time{}, ErrBadSignature},
		{"sha1 prefix", headers(hdr, "sha1="+sig), body, time.Time{}, ErrBadSignature},
		{"bad hex", headers(hdr, "sha256="+strings.Repeat("zz", 32)), body, time.Time{}, ErrBadSignature},
		{"truncated", headers(hdr, "sha256="+sig[:62]), body, time.Time{}, ErrBadSignature},
		{"trailing junk", headers(hdr, "sha256="+sig+"00"), body, time.Time{}, ErrBadSignature},
		{"garbage", headers(hdr, "\x00\xff,,=="), body, time.Time{}, ErrBadSignature},
	}
	runVerifyCases(t, VerifyConfig{Scheme: SchemeGitHub, Secrets: []string{secret}}, cases, sig, other)

	t.Run("rotation", func(t *testing.T) {
		rotated := []verifyCase{
			{"second secret", headers(hdr, "sha256="+sig), body, time.Time{}, nil},
			{"first secret", headers(hdr, "sha256="+other), body, time.Time{}, nil},
			{"neither", headers(hdr, "sha256="+hexMAC("third", body)), body, time.Time{}, ErrBadSignature},
		}
		cfg := VerifyConfig{Scheme: SchemeGitHub, Secrets: []string{"another secret", secret}}
		runVerifyCases(t, cfg, rotated, sig, other)
	})
}

func TestVerifyShopify(t *testing.T) {
	// Shopify publishes no vector: the signature is computed here with crypto/hmac.
	const (
		secret = "shpss_0123456789abcdef"
		body   = `{"id":820982911946154500,"email":"jon@example.com"}`
	)
	const hdr = "X-Shopify-Hmac-Sha256"
	sig := b64MAC([]byte(secret), body)
	other := b64MAC([]byte("old secret"), body)
	// Same bytes, different text: the last data character carries padding bits
	// that a canonical encoder leaves zero; a lenient decoder ignores them.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	raw := []byte(sig)
	raw[len(raw)-2] = alphabet[strings.IndexByte(alphabet, raw[len(raw)-2])^1]
	nonCanonical := string(raw)
	if lenient, _ := base64.StdEncoding.DecodeString(nonCanonical); !hmac.Equal(lenient, macOf(sha256.New, []byte(secret), body)) {
		t.Fatalf("%s does not decode leniently to the signature", nonCanonical)
	}
	cases := []verifyCase{
		{"valid", headers(hdr, sig), body, time.Time{}, nil},
		{"signed with another secret", headers(hdr, other), body, time.Time{}, ErrBadSignature},
		{"tampered body", headers(hdr, sig), strings.Replace(body, "jon", "jan", 1), time.Time{}, ErrBadSignature},
		{"no header", headers(), body, time.Time{}, ErrMissingSignature},
		{"hex instead of base64", headers(hdr, hexMAC(secret, body)), body, time.Time{}, ErrBadSignature},
		{"unpadded", headers(hdr, strings.TrimRight(sig, "=")), body, time.Time{}, ErrBadSignature},
		{"non-canonical padding bits", headers(hdr, nonCanonical), body, time.Time{}, ErrBadSignature},
		{"bad base64", headers(hdr, strings.Repeat("!", len(sig))), body, time.Time{}, ErrBadSignature},
		{"garbage", headers(hdr, "v1,sha256=?"), body, time.Time{}, ErrBadSignature},
	}
	runVerifyCases(t, VerifyConfig{Scheme: SchemeShopify, Secrets: []string{secret}}, cases, sig, other)

	t.Run("rotation", func(t *testing.T) {
		cfg := VerifyConfig{Scheme: SchemeShopify, Secrets: []string{"old secret", secret}}
		runVerifyCases(t, cfg, []verifyCase{
			{"second secret", headers(hdr, sig), body, time.Time{}, nil},
			{"first secret", headers(hdr, other), body, time.Time{}, nil},
		}, sig, other)
	})
}

func TestVerifySlack(t *testing.T) {
	// api.slack.com, "Verifying requests from Slack": the worked example.
	const (
		secret = "8f742231b10e8888abcd99yyyzzz85a5"
		ts     = "1531420618"
		body   = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
		sig    = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
	)
	const sigHdr, tsHdr = "X-Slack-Signature", "X-Slack-Request-Timestamp"
	if got := "v0=" + hexMAC(secret, "v0:"+ts+":"+body); got != sig {
		t.Fatalf("test signer disagrees with Slack's example: %s", got)
	}
	signedAt := time.Unix(1531420618, 0)
	slack := func(sig, ts string) http.Header { return headers(sigHdr, sig, tsHdr, ts) }
	other := "v0=" + hexMAC("rotated secret", "v0:"+ts+":"+body)
	cases := []verifyCase{
		{"published example", slack(sig, ts), body, signedAt.Add(time.Minute), nil},
		{"at the tolerance", slack(sig, ts), body, signedAt.Add(DefaultTolerance), nil},
		{"stale", slack(sig, ts), body, signedAt.Add(DefaultTolerance + time.Second), ErrStaleTimestamp},
		{"future", slack(sig, ts), body, signedAt.Add(-DefaultTolerance - time.Second), ErrStaleTimestamp},
		{"signed with another secret", slack(other, ts), body, signedAt, ErrBadSignature},
		{"tampered body", slack(sig, ts), body + "&admin=1", signedAt, ErrBadSignature},
		{"timestamp changed", slack(sig, "1531420619"), body, signedAt, ErrBadSignature},
		{"no signature", headers(tsHdr, ts), body, signedAt, ErrMissingSignature},
		{"no timestamp", headers(sigHdr, sig), body, signedAt, ErrMissingSignature},
		{"nothing", headers(), body, signedAt, ErrMissingSignature},
		{"non-numeric timestamp", slack(sig, "yesterday"), body, signedAt, ErrBadSignature},
		{"fractional timestamp", slack(sig, ts+".5"), body, signedAt, ErrBadSignature},
		{"negative timestamp", slack(sig, "-"+ts), body, signedAt, ErrBadSignature},
		{"millisecond timestamp", slack(sig, ts+"000"), body, signedAt, ErrBadSignature},
		{"huge timestamp", slack(sig, strings.Repeat("9", 40)), body, signedAt, ErrBadSignature},
		{"wrong version", slack("v1="+sig[3:], ts), body, signedAt, ErrBadSignature},
		{"bad hex", slack("v0="+strings.Repeat("g", 64), ts), body, signedAt, ErrBadSignature},
		{"garbage", slack("v0=", ts), body, signedAt, ErrBadSignature},
	}
	runVerifyCases(t, VerifyConfig{Scheme: SchemeSlack, Secrets: []string{secret}}, cases, sig[3:], other[3:])

	t.Run("rotation and tolerance", func(t *testing.T) {
		cfg := VerifyConfig{Scheme: SchemeSlack, Secrets: []string{"rotated secret", secret}, Tolerance: 10 * time.Minute}
		runVerifyCases(t, cfg, []verifyCase{
			{"second secret", slack(sig, ts), body, signedAt.Add(9 * time.Minute), nil},
			{"first secret", slack(other, ts), body, signedAt.Add(-9 * time.Minute), nil},
			{"beyond the tolerance", slack(sig, ts), body, signedAt.Add(11 * time.Minute), ErrStaleTimestamp},
		}, sig[3:], other[3:])
	})
}

func TestVerifyStripe(t *testing.T) {
	// Stripe publishes no vector: signatures are computed here with crypto/hmac, keyed
	// with the secret string itself, as Stripe's libraries do.
	const (
		secret = "whsec_test_5WbX5kEWLlfzsGNjH64I8lOOqUB6e8FH"
		body   = `{"id":"evt_1","object":"event","type":"invoice.paid"}`
	)
	const hdr = "Stripe-Signature"
	ts := unix(testNow)
	good := hexMAC(secret, ts+"."+body)
	other := hexMAC("whsec_other", ts+"."+body)
	wrong := hexMAC(secret, ts+"."+body+"x")
	at := func(d time.Duration) (string, string) {
		t := unix(testNow.Add(d))
		return t, hexMAC(secret, t+"."+body)
	}
	oldTS, oldSig := at(-DefaultTolerance - time.Second)
	newTS, newSig := at(DefaultTolerance + time.Second)
	edgeTS, edgeSig := at(-DefaultTolerance)
	many := func(valid int) string {
		var b strings.Builder
		b.WriteString("t=" + ts)
		for i := range 20 {
			if i == valid {
				b.WriteString(",v1=" + good)
			} else {
				b.WriteString(",v1=" + wrong)
			}
		}
		return b.String()
	}
	cases := []verifyCase{
		{"valid", headers(hdr, "t="+ts+",v1="+good), body, time.Time{}, nil},
		{"valid with v0", headers(hdr, "t="+ts+",v1="+good+",v0="+wrong), body, time.Time{}, nil},
		{"items in any order", headers(hdr, "v1="+good+",t="+ts), body, time.Time{}, nil},
		{"second of two v1", headers(hdr, "t="+ts+",v1="+wrong+",v1="+good), body, time.Time{}, nil},
		{"first of two v1", headers(hdr, "t="+ts+",v1="+good+",v1="+wrong), body, time.Time{}, nil},
		{"unknown items skipped", headers(hdr, "t="+ts+",x,v9=1,v1="+good), body, time.Time{}, nil},
		{"16th signature", headers(hdr, many(maxSignatures-1)), body, time.Time{}, nil},
		{"17th signature is not considered", headers(hdr, many(maxSignatures)), body, time.Time{}, ErrBadSignature},
		{"at the tolerance", headers(hdr, "t="+edgeTS+",v1="+edgeSig), body, time.Time{}, nil},
		{"stale", headers(hdr, "t="+oldTS+",v1="+oldSig), body, time.Time{}, ErrStaleTimestamp},
		{"future", headers(hdr, "t="+newTS+",v1="+newSig), body, time.Time{}, ErrStaleTimestamp},
		{"signed with another secret", headers(hdr, "t="+ts+",v1="+other), body, time.Time{}, ErrBadSignature},
		{"tampered body", headers(hdr, "t="+ts+",v1="+good), body + " ", time.Time{}, ErrBadSignature},
		{"timestamp swapped", headers(hdr, "t="+edgeTS+",v1="+good), body, time.Time{}, ErrBadSignature},
		{"only v0", headers(hdr, "t="+ts+",v0="+good), body, time.Time{}, ErrBadSignature},
		{"no header", headers(), body, time.Time{}, ErrMissingSignature},
		{"missing t=", headers(hdr, "v1="+good), body, time.Time{}, ErrBadSignature},
		{"empty t=", headers(hdr, "t=,v1="+good), body, time.Time{}, ErrBadSignature},
		{"two t=", headers(hdr, "t="+ts+",t="+ts+",v1="+good), body, time.Time{}, ErrBadSignature},
		{"non-numeric t=", headers(hdr, "t=now,v1="+good), body, time.Time{}, ErrBadSignature},
		{"spaces", headers(hdr, "t="+ts+", v1="+good), body, time.Time{}, ErrBadSignature},
		{"bad hex", headers(hdr, "t="+ts+",v1="+strings.Repeat("x", 64)), body, time.Time{}, ErrBadSignature},
		{"empty v1", headers(hdr, "t="+ts+",v1="), body, time.Time{}, ErrBadSignature},
		{"garbage", headers(hdr, ",,,=,=="), body, time.Time{}, ErrBadSignature},
	}
	runVerifyCases(t, VerifyConfig{Scheme: SchemeStripe, Secrets: []string{secret}}, cases, good, other, wrong)

	t.Run("rotation", func(t *testing.T) {
		cfg := VerifyConfig{Scheme: SchemeStripe, Secrets: []string{"whsec_other", secret}}
		runVerifyCases(t, cfg, []verifyCase{
			{"second secret", headers(hdr, "t="+ts+",v1="+good), body, time.Time{}, nil},
			{"first secret", headers(hdr, "t="+ts+",v1="+other), body, time.Time{}, nil},
			{"both, as Stripe sends during a roll", headers(hdr, "t="+ts+",v1="+other+",v1="+good), body, time.Time{}, nil},
		}, good, other)
	})
}

// The Standard Webhooks specification's test vector.
const (
	swSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTS     = "1614265330"
	swBody   = `{"test": 2432232314}`
	swSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func swHeaders(prefix, id, ts, sig string) http.Header {
	return headers(prefix+"-id", id, prefix+"-timestamp", ts, prefix+"-signature", sig)
}

func TestVerifyStandardWebhooks(t *testing.T) {
	signedAt := time.Unix(1614265330, 0)
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(swSecret, "whsec_"))
	if got := "v1," + b64MAC(key, swID+"."+swTS+"."+swBody); got != swSig {
		t.Fatalf("test signer disagrees with the specification's vector: %s", got)
	}
	const rotated = "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="
	rotatedKey, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(rotated, "whsec_"))
	other := "v1," + b64MAC(rotatedKey, swID+"."+swTS+"."+swBody)
	wrong := "v1," + b64MAC(key, "x")
	oldTS := unix(signedAt.Add(-DefaultTolerance - time.Second))
	newTS := unix(signedAt.Add(DefaultTolerance + time.Second))
	sign := func(ts string) string { return "v1," + b64MAC(key, swID+"."+ts+"."+swBody) }
	std := func(id, ts, sig string) http.Header { return swHeaders("webhook", id, ts, sig) }
	cases := []verifyCase{
		{"specification vector", std(swID, swTS, swSig), swBody, signedAt, nil},
		{"svix headers", swHeaders("svix", swID, swTS, swSig), swBody, signedAt, nil},
		{"several signatures, last valid", std(swID, swTS, wrong+" "+other+" "+swSig), swBody, signedAt, nil},
		{"several signatures, first valid", std(swID, swTS, swSig+" "+wrong), swBody, signedAt, nil},
		{"v1a and unknown versions skipped", std(swID, swTS, "v1a,"+swSig[3:]+" v2,xyz "+swSig), swBody, signedAt, nil},
		{"double space", std(swID, swTS, wrong+"  "+swSig), swBody, signedAt, nil},
		{"only v1a", std(swID, swTS, "v1a,"+swSig[3:]), swBody, signedAt, ErrBadSignature},
		{"signed with another secret", std(swID, swTS, other), swBody, signedAt, ErrBadSignature},
		{"tampered body", std(swID, swTS, swSig), swBody + "\n", signedAt, ErrBadSignature},
		{"other id", std("msg_other", swTS, swSig), swBody, signedAt, ErrBadSignature},
		{"stale", std(swID, oldTS, sign(oldTS)), swBody, signedAt, ErrStaleTimestamp},
		{"future", std(swID, newTS, sign(newTS)), swBody, signedAt, ErrStaleTimestamp},
		{"no headers", headers(), swBody, signedAt, ErrMissingSignature},
		{"no id", headers("webhook-timestamp", swTS, "webhook-signature", swSig), swBody, signedAt, ErrMissingSignature},
		{"no timestamp", headers("webhook-id", swID, "webhook-signature", swSig), swBody, signedAt, ErrMissingSignature},
		{"no signature", headers("webhook-id", swID, "webhook-timestamp", swTS), swBody, signedAt, ErrMissingSignature},
		{"families mixed", headers("webhook-id", swID, "svix-timestamp", swTS, "svix-signature", swSig), swBody, signedAt, ErrMissingSignature},
		{"partial webhook-* beside full svix-*", headers("webhook-id", swID, "svix-id", swID, "svix-timestamp", swTS, "svix-signature", swSig), swBody, signedAt, ErrMissingSignature},
		{"both families", headers("webhook-id", swID, "webhook-timestamp", swTS, "webhook-signature", swSig, "svix-id", "x", "svix-timestamp", "1", "svix-signature", "v1,x"), swBody, signedAt, nil},
		{"non-numeric timestamp", std(swID, "2021-02-25", swSig), swBody, signedAt, ErrBadSignature},
		{"bad base64", std(swID, swTS, "v1,"+strings.Repeat("*", 44)), swBody, signedAt, ErrBadSignature},
		{"no version", std(swID, swTS, swSig[3:]), swBody, signedAt, ErrBadSignature},
		{"garbage", std(swID, swTS, ",,, v1, v1,="), swBody, signedAt, ErrBadSignature},
	}
	cfg := VerifyConfig{Scheme: SchemeStandardWebhooks, Secrets: []string{swSecret}}
	runVerifyCases(t, cfg, cases, swSig[3:], other[3:], strings.TrimPrefix(swSecret, "whsec_"))

	t.Run("rotation", func(t *testing.T) {
		cfg := VerifyConfig{Scheme: SchemeStandardWebhooks, Secrets: []string{rotated, swSecret}}
		runVerifyCases(t, cfg, []verifyCase{
			{"second secret", std(swID, swTS, swSig), swBody, signedAt, nil},
			{"first secret", std(swID, swTS, other), swBody, signedAt, nil},
		}, swSig[3:], other[3:])
	})
	t.Run("secret without prefix", func(t *testing.T) {
		cfg := VerifyConfig{Scheme: SchemeStandardWebhooks, Secrets: []string{strings.TrimPrefix(swSecret, "whsec_")}}
		runVerifyCases(t, cfg, []verifyCase{{"vector", std(swID, swTS, swSig), swBody, signedAt, nil}})
	})
}

// TestVerifyStandardWebhooksOfficialLibrary signs with the reference Go library and checks
// that we agree with its own verification.
func TestVerifyStandardWebhooksOfficialLibrary(t *testing.T) {
	const second = "whsec_dGhlLXNlY29uZC1zZWNyZXQtb2YtdGhlLWVuZHBvaW50"
	first, err := standardwebhooks.NewWebhook(swSecret)
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := standardwebhooks.NewWebhook(second)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := NewVerifier(VerifyConfig{Scheme: SchemeStandardWebhooks, Secrets: []string{swSecret, second}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now() // the library's Verify reads the real clock
	body := []byte(`{"type":"invoice.paid","data":{"id":"in_1"}}`)
	sigFirst, err := first.Sign("msg_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	sigSecond, err := rotated.Sign("msg_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	ts := unix(now)
	cases := []struct {
		name   string
		header http.Header
		body   []byte
		valid  bool
	}{
		{"first secret", swHeaders("webhook", "msg_1", ts, sigFirst), body, true},
		{"second secret", swHeaders("webhook", "msg_1", ts, sigSecond), body, true},
		{"both", swHeaders("webhook", "msg_1", ts, sigSecond+" "+sigFirst), body, true},
		{"v1a then v1", swHeaders("webhook", "msg_1", ts, "v1a,abc "+sigFirst), body, true},
		{"tampered body", swHeaders("webhook", "msg_1", ts, sigFirst), append(body, ' '), false},
		{"other id", swHeaders("webhook", "msg_2", ts, sigFirst), body, false},
		{"stale", swHeaders("webhook", "msg_1", unix(now.Add(-time.Hour)), sigFirst), body, false},
		{"no v1", swHeaders("webhook", "msg_1", ts, "v2,"+sigFirst[3:]), body, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ours.Verify(tc.header, tc.body, now)
			if (err == nil) != tc.valid {
				t.Errorf("ours: Verify = %v, want valid=%v", err, tc.valid)
			}
			libErr := first.Verify(tc.body, tc.header)
			if libErr != nil {
				libErr = rotated.Verify(tc.body, tc.header)
			}
			if (libErr == nil) != tc.valid {
				t.Errorf("official library: Verify = %v, want valid=%v", libErr, tc.valid)
			}
		})
	}
}

func TestVerifyHMAC(t *testing.T) {
	const secret, body = "generic-secret", `{"ok":true}`
	hashes := map[string]func() hash.Hash{"sha1": sha1.New, "sha256": sha256.New, "sha512": sha512.New}
	encoders := map[string]func([]byte) string{"hex": hex.EncodeToString, "base64": base64.StdEncoding.EncodeToString}
	for alg, newHash := range hashes {
		for enc, encode := range encoders {
			t.Run(alg+"/"+enc, func(t *testing.T) {
				sig := encode(macOf(newHash, []byte(secret), body))
				other := encode(macOf(newHash, []byte("other"), body))
				short := encode(macOf(sha1.New, []byte(secret), body))
				if alg == "sha1" {
					short = encode(macOf(sha256.New, []byte(secret), body))
				}
				const hdr = "X-Signature"
				cases := []verifyCase{
					{"valid", headers(hdr, "sig="+sig), body, time.Time{}, nil},
					{"signed with another secret", headers(hdr, "sig="+other), body, time.Time{}, ErrBadSignature},
					{"tampered body", headers(hdr, "sig="+sig), body + "{}", time.Time{}, ErrBadSignature},
					{"no prefix", headers(hdr, sig), body, time.Time{}, ErrBadSignature},
					{"another algorithm", headers(hdr, "sig="+short), body, time.Time{}, ErrBadSignature},
					{"no header", headers("X-Other", "sig="+sig), body, time.Time{}, ErrMissingSignature},
					{"garbage", headers(hdr, "sig=%%%"), body, time.Time{}, ErrBadSignature},
				}
				cfg := VerifyConfig{Scheme: SchemeHMAC, Secrets: []string{secret}, Header: "x-signature",
					Algorithm: alg, Encoding: enc, Prefix: "sig="}
				runVerifyCases(t, cfg, cases, sig, other)
			})
		}
	}
	t.Run("defaults are sha256 and hex", func(t *testing.T) {
		cfg := VerifyConfig{Scheme: SchemeHMAC, Secrets: []string{"old", secret}, Header: "X-Sig"}
		runVerifyCases(t, cfg, []verifyCase{
			{"rotation", headers("X-Sig", hexMAC(secret, body)), body, time.Time{}, nil},
			{"base64 refused", headers("X-Sig", b64MAC([]byte(secret), body)), body, time.Time{}, ErrBadSignature},
		})
	})
}

func TestVerifyNone(t *testing.T) {
	v, err := NewVerifier(VerifyConfig{Scheme: SchemeNone})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(headers(), nil, time.Time{}); err != nil {
		t.Errorf("Verify = %v, want nil", err)
	}
}

func TestHeaderFunc(t *testing.T) {
	// A Fiber ctx answers any case; so does this map lookup.
	m := map[string]string{"x-hub-signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}
	get := HeaderFunc(func(name string) string { return m[strings.ToLower(name)] })
	v, err := NewVerifier(VerifyConfig{Scheme: SchemeGitHub, Secrets: []string{"It's a Secret to Everybody"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(get, []byte("Hello, World!"), testNow); err != nil {
		t.Errorf("Verify = %v, want nil", err)
	}
}

func TestNewVerifierConfigErrors(t *testing.T) {
	const secret = "s3cr3t-value-never-echoed"
	cases := []struct {
		name  string
		cfg   VerifyConfig
		field []string // every ConfigError.Field expected, in order
	}{
		{"no scheme", VerifyConfig{Secrets: []string{secret}}, []string{"scheme"}},
		{"unknown scheme", VerifyConfig{Scheme: "Stripe", Secrets: []string{secret}}, []string{"scheme"}},
		{"no secrets", VerifyConfig{Scheme: SchemeStripe}, []string{"secrets"}},
		{"empty secret", VerifyConfig{Scheme: SchemeGitHub, Secrets: []string{secret, ""}}, []string{"secrets[1]"}},
		{"secrets with none", VerifyConfig{Scheme: SchemeNone, Secrets: []string{secret}}, []string{"secrets"}},
		{"negative tolerance", VerifyConfig{Scheme: SchemeSlack, Secrets: []string{secret}, Tolerance: -time.Second}, []string{"tolerance"}},
		{"hmac without header", VerifyConfig{Scheme: SchemeHMAC, Secrets: []string{secret}}, []string{"header"}},
		{"hmac bad header", VerifyConfig{Scheme: SchemeHMAC, Secrets: []string{secret}, Header: "X Sig:"}, []string{"header"}},
		{"bad algorithm", VerifyConfig{Scheme: SchemeHMAC, Secrets: []string{secret}, Header: "X-Sig", Algorithm: "md5"}, []string{"algorithm"}},
		{"bad encoding", VerifyConfig{Scheme: SchemeHMAC, Secrets: []string{secret}, Header: "X-Sig", Encoding: "base32"}, []string{"encoding"}},
		{"hmac fields on github", VerifyConfig{Scheme: SchemeGitHub, Secrets: []string{secret}, Header: "X-Sig", Prefix: "sha1="}, []string{"header", "prefix"}},
		{"bad whsec", VerifyConfig{Scheme: SchemeStandardWebhooks, Secrets: []string{"whsec_" + secret}}, []string{"secrets[0]"}},
		{"empty whsec", VerifyConfig{Scheme: SchemeStandardWebhooks, Secrets: []string{"whsec_"}}, []string{"secrets[0]"}},
		{"second whsec bad", VerifyConfig{Scheme: SchemeStandardWebhooks, Secrets: []string{swSecret, "whsec_!!" + secret}}, []string{"secrets[1]"}},
		{"every problem at once", VerifyConfig{Scheme: SchemeHMAC, Secrets: []string{""}, Algorithm: "md5", Encoding: "b64"},
			[]string{"header", "algorithm", "encoding", "secrets[0]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(tc.cfg)
			if err == nil {
				t.Fatalf("NewVerifier = %T, nil; want an error", v)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q echoes the secret", err)
			}
			var got []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ce *ConfigError
				if !errors.As(e, &ce) {
					t.Fatalf("%v is not a *ConfigError", e)
				}
				got = append(got, ce.Field)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.field) {
				t.Errorf("fields = %v, want %v (error: %v)", got, tc.field, err)
			}
		})
	}
}

func TestNewVerifierAcceptsEveryScheme(t *testing.T) {
	for _, cfg := range []VerifyConfig{
		{Scheme: SchemeStripe, Secrets: []string{"whsec_x"}, Tolerance: time.Minute},
		{Scheme: SchemeGitHub, Secrets: []string{"x"}, Tolerance: time.Minute}, // ignored, not refused
		{Scheme: SchemeShopify, Secrets: []string{"x"}},
		{Scheme: SchemeSlack, Secrets: []string{"x"}},
		{Scheme: SchemeStandardWebhooks, Secrets: []string{swSecret}},
		{Scheme: SchemeHMAC, Secrets: []string{"x"}, Header: "X-Sig", Algorithm: "sha512", Encoding: "base64", Prefix: "v1="},
		{Scheme: SchemeNone},
	} {
		if _, err := NewVerifier(cfg); err != nil {
			t.Errorf("NewVerifier(%s) = %v", cfg.Scheme, err)
		}
	}
}

// TestVerifyConcurrent shares one verifier, and its pooled hash states, between
// goroutines; run with -race.
func TestVerifyConcurrent(t *testing.T) {
	const secret = "concurrent"
	v, err := NewVerifier(VerifyConfig{Scheme: SchemeStripe, Secrets: []string{"old", secret}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				body := fmt.Sprintf(`{"g":%d,"i":%d}`, g, i)
				ts := unix(testNow)
				h := headers("Stripe-Signature", "t="+ts+",v1="+hexMAC(secret, ts+"."+body))
				if err := v.Verify(h, []byte(body), testNow); err != nil {
					t.Errorf("goroutine %d, request %d: %v", g, i, err)
					return
				}
				if err := v.Verify(h, []byte(body+" "), testNow); !errors.Is(err, ErrBadSignature) {
					t.Errorf("goroutine %d, request %d: tampered body: %v", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// The timestamped schemes (stripe, slack, standard-webhooks) against the
// providers' published tolerance rules, on a clock like the one Receive
// passes in production (time.Now(): nanoseconds, not whole seconds), at
// both edges, and with timestamp garbage that is correctly signed, so that
// the timestamp parse alone decides. Signatures are computed with
// crypto/hmac (macOf, hexMAC, b64MAC in verify_test.go), never with the
// code under test.

// tsSigner signs one request of a timestamped scheme at timestamp ts (as written in the header).
type tsSigner struct {
	scheme string
	cfg    VerifyConfig
	sign   func(ts string) http.Header
}

func timestampedSchemes(t *testing.T) []tsSigner {
	t.Helper()
	const body = `{"id":"evt_probe","type":"probe.created","event_id":"Ev1"}`
	const stripeSecret, slackSecret = "whsec_probe_stripe", "probe-slack-signing-secret"
	swKey, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(swSecret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	return []tsSigner{
		{"stripe", VerifyConfig{Scheme: SchemeStripe, Secrets: []string{stripeSecret}}, func(ts string) http.Header {
			// stripe.com/docs/webhooks/signatures: signed_payload = "<t>.<body>", hex HMAC-SHA256.
			return headers("Stripe-Signature", "t="+ts+",v1="+hexMAC(stripeSecret, ts+"."+body))
		}},
		{"slack", VerifyConfig{Scheme: SchemeSlack, Secrets: []string{slackSecret}}, func(ts string) http.Header {
			// api.slack.com/authentication/verifying-requests-from-slack: "v0:<ts>:<body>".
			return headers("X-Slack-Signature", "v0="+hexMAC(slackSecret, "v0:"+ts+":"+body), "X-Slack-Request-Timestamp", ts)
		}},
		{"standard-webhooks", VerifyConfig{Scheme: SchemeStandardWebhooks, Secrets: []string{swSecret}}, func(ts string) http.Header {
			// Standard Webhooks spec: "<msg_id>.<timestamp>.<payload>", base64, "v1,".
			return swHeaders("webhook", "msg_probe", ts, "v1,"+b64MAC(swKey, "msg_probe."+ts+"."+body))
		}},
	}
}

const tsBody = `{"id":"evt_probe","type":"probe.created","event_id":"Ev1"}`

// TestVerifyToleranceEdgesOnAProductionClock: the providers' reference checks, with a clock half a
// second past a whole second (as time.Now() is):
//   - Stripe (stripe-go: time.Since(t) > tolerance is too old; stripe-php: abs(now-t) > tolerance),
//   - Slack ("if abs(time.time() - timestamp) > 60 * 5: return"),
//   - Standard Webhooks (official Go library: now.Sub(ts) > tolerance too old,
//     ts.After(now.Add(tolerance)) too new).
//
// So a timestamp 299.5 s away either way is accepted and one 300.5 s away is refused; in particular a
// timestamp exactly "tolerance" ahead of the whole second is still within tolerance of the real clock.
func TestVerifyToleranceEdgesOnAProductionClock(t *testing.T) {
	now := testNow.Add(500 * time.Millisecond)
	sec := testNow.Unix()
	tol := int64(DefaultTolerance / time.Second)
	cases := []struct {
		name string
		ts   int64
		want error
	}{
		{"299.5 s in the future", sec + tol, nil},
		{"300.5 s in the future", sec + tol + 1, ErrStaleTimestamp},
		{"299.5 s old", sec - tol + 1, nil},
		{"300.5 s old", sec - tol, ErrStaleTimestamp},
		{"now, truncated", sec, nil},
		{"far future, 12 digits", 999_999_999_999, ErrStaleTimestamp},
		{"epoch", 0, ErrStaleTimestamp},
	}
	for _, s := range timestampedSchemes(t) {
		v := mustVerifier(t, s.cfg)
		for _, tc := range cases {
			t.Run(s.scheme+"/"+tc.name, func(t *testing.T) {
				err := v.Verify(s.sign(strconv.FormatInt(tc.ts, 10)), []byte(tsBody), now)
				checkVerifyError(t, err, tc.want, s.cfg.Secrets...)
			})
		}
	}
}

// TestVerifyCorrectlySignedTimestampGarbageIsRefused: every scheme's docs define the timestamp as
// integer Unix seconds. Garbage that is itself correctly signed must still be refused (401: one
// sentinel, no panic), so the parse, not the signature, is what refuses it. Slack's existing test
// signs the real timestamp, and stripe/standard-webhooks have no such cases for signs, overflow
// past int64 and exponents.
func TestVerifyCorrectlySignedTimestampGarbageIsRefused(t *testing.T) {
	ts := unix(testNow)
	for _, s := range timestampedSchemes(t) {
		v := mustVerifier(t, s.cfg)
		for _, garbage := range []string{
			"-1", "-" + ts, "+" + ts, ts + ".0", ts + "000", "1.7e9", "0x6553f100", " " + ts, ts + " ",
			"9223372036854775807", "9223372036854775808", strings.Repeat("9", 40), "１７００００００００",
		} {
			t.Run(s.scheme+"/"+garbage, func(t *testing.T) {
				err := v.Verify(s.sign(garbage), []byte(tsBody), testNow)
				if err == nil {
					t.Fatalf("timestamp %q accepted", garbage)
				}
				if !errors.Is(err, ErrBadSignature) && !errors.Is(err, ErrStaleTimestamp) {
					t.Fatalf("timestamp %q: %v, want bad signature or stale", garbage, err)
				}
				checkFuzzError(t, err, s.cfg.Secrets...)
			})
		}
	}
}
