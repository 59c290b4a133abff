package inbound

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkVerify measures the accepting path, the one every legitimate webhook takes,
// with a 1 KiB body and one secret.
func BenchmarkVerify(b *testing.B) {
	body := bytes.Repeat([]byte(`{"k":"0123456789abcdef"}`), 1024/24+1)[:1024]
	ts := unix(testNow)
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(swSecret, "whsec_"))
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name   string
		cfg    VerifyConfig
		header http.Header
	}{
		{SchemeStripe, VerifyConfig{Scheme: SchemeStripe, Secrets: []string{fuzzSecret}},
			headers("Stripe-Signature", "t="+ts+",v1="+hexMAC(fuzzSecret, ts+"."+string(body)))},
		{SchemeGitHub, VerifyConfig{Scheme: SchemeGitHub, Secrets: []string{fuzzSecret}},
			headers("X-Hub-Signature-256", "sha256="+hexMAC(fuzzSecret, string(body)))},
		{SchemeShopify, VerifyConfig{Scheme: SchemeShopify, Secrets: []string{fuzzSecret}},
			headers("X-Shopify-Hmac-Sha256", b64MAC([]byte(fuzzSecret), string(body)))},
		{SchemeSlack, VerifyConfig{Scheme: SchemeSlack, Secrets: []string{fuzzSecret}},
			headers("X-Slack-Request-Timestamp", ts, "X-Slack-Signature", "v0="+hexMAC(fuzzSecret, "v0:"+ts+":"+string(body)))},
		{SchemeStandardWebhooks, VerifyConfig{Scheme: SchemeStandardWebhooks, Secrets: []string{swSecret}},
			swHeaders("webhook", "msg_2Lq1cMTvHxS1Xq9Ak2xY7bnCv5", ts, "v1,"+b64MAC(key, "msg_2Lq1cMTvHxS1Xq9Ak2xY7bnCv5."+ts+"."+string(body)))},
		{SchemeHMAC, VerifyConfig{Scheme: SchemeHMAC, Secrets: []string{fuzzSecret}, Header: "X-Signature"},
			headers("X-Signature", hexMAC(fuzzSecret, string(body)))},
		{SchemeNone, VerifyConfig{Scheme: SchemeNone}, headers()},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			v := mustVerifier(b, bc.cfg)
			if err := v.Verify(bc.header, body, testNow); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := v.Verify(bc.header, body, testNow); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
