package inbound

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Each fuzz target feeds hostile headers and bodies to one parser and checks two things
// beyond "no panic": a failure wraps exactly one sentinel and leaks no secret, and a
// success happens only when the input carries the right signature, as computed by the
// test's own crypto/hmac signer and parsed by the test's own naive parser.

const fuzzSecret = "fuzz-secret-0123456789"

// checkFuzzError fails unless err wraps exactly one sentinel and does not quote private.
func checkFuzzError(t *testing.T, err error, private ...string) {
	t.Helper()
	n := 0
	for _, s := range []error{ErrMissingSignature, ErrBadSignature, ErrStaleTimestamp} {
		if errors.Is(err, s) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("error %v wraps %d sentinels, want 1", err, n)
	}
	for _, p := range private {
		if strings.Contains(err.Error(), p) {
			t.Fatalf("error %q leaks %q", err, p)
		}
	}
}

// freshTimestamp is the oracle for timestamps: plain digits within the default tolerance.
func freshTimestamp(ts string) bool {
	if ts == "" || strings.TrimLeft(ts, "0123456789") != "" {
		return false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	d := sec - testNow.Unix()
	return -300 <= d && d <= 300
}

func mustVerifier(t testing.TB, cfg VerifyConfig) Verifier {
	t.Helper()
	v, err := NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func FuzzStripeHeader(f *testing.F) {
	ts := unix(testNow)
	body := `{"id":"evt_1"}`
	good := hexMAC(fuzzSecret, ts+"."+body)
	for _, h := range []string{
		"t=" + ts + ",v1=" + good,
		"t=" + ts + ",v1=" + strings.Repeat("0", 64) + ",v1=" + good + ",v0=" + good,
		"v1=" + good + ",t=" + ts,
		"t=" + ts + ",t=" + ts + ",v1=" + good,
		"t=" + unix(testNow.Add(-time.Hour)) + ",v1=" + good,
		"t=,v1=", ",,,", "=", "t", "v1=" + good, "",
	} {
		f.Add(h, []byte(body))
	}
	v := mustVerifier(f, VerifyConfig{Scheme: SchemeStripe, Secrets: []string{fuzzSecret}})
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		err := v.Verify(http.Header{"Stripe-Signature": {header}}, body, testNow)
		if err != nil {
			checkFuzzError(t, err, fuzzSecret)
			return
		}
		var tss, sigs []string
		for item := range strings.SplitSeq(header, ",") {
			if v, ok := strings.CutPrefix(item, "t="); ok {
				tss = append(tss, v)
			}
			if v, ok := strings.CutPrefix(item, "v1="); ok {
				sigs = append(sigs, v)
			}
		}
		if len(tss) != 1 || !freshTimestamp(tss[0]) {
			t.Fatalf("accepted %q: timestamps %q", header, tss)
		}
		want := hexMAC(fuzzSecret, tss[0]+"."+string(body))
		for _, s := range sigs {
			if strings.EqualFold(s, want) {
				return
			}
		}
		t.Fatalf("accepted %q, which lacks v1=%s", header, want)
	})
}

func FuzzSlackHeader(f *testing.F) {
	ts := unix(testNow)
	body := "token=x&team_id=T1"
	good := "v0=" + hexMAC(fuzzSecret, "v0:"+ts+":"+body)
	f.Add(ts, good, []byte(body))
	f.Add(ts, strings.ToUpper(good), []byte(body))
	f.Add("0"+ts, good, []byte(body))
	f.Add(ts+" ", good, []byte(body))
	f.Add(ts, "v0=", []byte(body))
	f.Add("", good, []byte(body))
	f.Add("-1", "v0=zz", []byte(nil))
	v := mustVerifier(f, VerifyConfig{Scheme: SchemeSlack, Secrets: []string{fuzzSecret}})
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		h := http.Header{"X-Slack-Request-Timestamp": {ts}, "X-Slack-Signature": {sig}}
		err := v.Verify(h, body, testNow)
		if err != nil {
			checkFuzzError(t, err, fuzzSecret)
			return
		}
		want := "v0=" + hexMAC(fuzzSecret, "v0:"+ts+":"+string(body))
		if !freshTimestamp(ts) || !strings.HasPrefix(sig, "v0=") || !strings.EqualFold(sig, want) {
			t.Fatalf("accepted ts %q, signature %q; want %s", ts, sig, want)
		}
	})
}

func FuzzStandardWebhooksHeader(f *testing.F) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(swSecret, "whsec_"))
	if err != nil {
		f.Fatal(err)
	}
	ts := unix(testNow)
	body := `{"type":"x"}`
	good := "v1," + b64MAC(key, "msg_1."+ts+"."+body)
	for _, sig := range []string{
		good, "v1,AAAA " + good, "v1a,xyz " + good, "  " + good + "  ",
		"v1," + good, "v1,", ",", " ", "v2," + good[3:], "",
	} {
		f.Add("msg_1", ts, sig, []byte(body), false)
		f.Add("msg_1", ts, sig, []byte(body), true)
	}
	f.Add("msg.1", ts+".", good, []byte(body), false)
	v := mustVerifier(f, VerifyConfig{Scheme: SchemeStandardWebhooks, Secrets: []string{swSecret}})
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte, svix bool) {
		prefix := "Webhook-"
		if svix {
			prefix = "Svix-"
		}
		h := http.Header{prefix + "Id": {id}, prefix + "Timestamp": {ts}, prefix + "Signature": {sig}}
		err := v.Verify(h, body, testNow)
		if err != nil {
			checkFuzzError(t, err, swSecret, strings.TrimPrefix(swSecret, "whsec_"))
			return
		}
		want := "v1," + b64MAC(key, id+"."+ts+"."+string(body))
		if id == "" || !freshTimestamp(ts) || !strings.Contains(" "+sig+" ", " "+want+" ") {
			t.Fatalf("accepted id %q, ts %q, signature %q; want %s", id, ts, sig, want)
		}
	})
}

func FuzzHMACHeader(f *testing.F) {
	body := `{"ok":true}`
	hexSig := "sha256=" + hexMAC(fuzzSecret, body)
	b64Sig := b64MAC([]byte(fuzzSecret), body)
	for _, value := range []string{hexSig, strings.ToUpper(hexSig), b64Sig, "sha256=", "sha256", "=", "", b64Sig + "="} {
		f.Add(value, []byte(body))
	}
	hexV := mustVerifier(f, VerifyConfig{Scheme: SchemeGitHub, Secrets: []string{fuzzSecret}})
	b64V := mustVerifier(f, VerifyConfig{Scheme: SchemeHMAC, Secrets: []string{fuzzSecret}, Header: "X-Sig", Encoding: "base64"})
	f.Fuzz(func(t *testing.T, value string, body []byte) {
		err := hexV.Verify(http.Header{"X-Hub-Signature-256": {value}}, body, testNow)
		if err != nil {
			checkFuzzError(t, err, fuzzSecret)
		} else if want := "sha256=" + hexMAC(fuzzSecret, string(body)); !strings.HasPrefix(value, "sha256=") || !strings.EqualFold(value, want) {
			t.Fatalf("hex: accepted %q, want %s", value, want)
		}
		err = b64V.Verify(http.Header{"X-Sig": {value}}, body, testNow)
		if err != nil {
			checkFuzzError(t, err, fuzzSecret)
		} else if want := b64MAC([]byte(fuzzSecret), string(body)); value != want {
			t.Fatalf("base64: accepted %q, want %s", value, want)
		}
	})
}
