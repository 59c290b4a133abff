package inbound

// The timestamped schemes (stripe, slack, standard-webhooks) against the
// providers' published tolerance rules, on a clock like the one Accept
// passes in production (time.Now(): nanoseconds, not whole seconds), at
// both edges, and with timestamp garbage that is correctly signed, so that
// the timestamp parse alone decides. Signatures are computed with
// crypto/hmac (macOf, hexMAC, b64MAC in verify_test.go), never with the
// code under test.

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

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
