package inbound

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"hash"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// Fuzz targets for the inbound parsers of outside input that other
// targets do not cover: the Shopify header and the generic hmac scheme with a prefix and
// sha1/sha512 (the existing FuzzHMACHeader covers GitHub and base64 sha256
// without a prefix), Slack's url_verification challenge, and the 202 body
// that quotes a provider's event ID back.

// FuzzShopifyAndPrefixedHMAC: a Shopify or prefixed-hmac signature header
// is accepted exactly when it is the signature the test computes itself
// with crypto/hmac (base64 canonical, hex either case after the exact
// prefix); every refusal wraps one sentinel and never quotes the secret.
func FuzzShopifyAndPrefixedHMAC(f *testing.F) {
	body := `{"id":820982911946154508,"topic":"orders/create"}`
	mac := func(newHash func() hash.Hash, msg string) []byte { return macOf(newHash, []byte(fuzzSecret), msg) }
	for _, v := range []string{
		base64.StdEncoding.EncodeToString(mac(sha256.New, body)),
		"sig=" + hex.EncodeToString(mac(sha1.New, body)),
		"sig=" + strings.ToUpper(hex.EncodeToString(mac(sha512.New, body))),
		"SIG=" + hex.EncodeToString(mac(sha1.New, body)),
		"sig=", "sig", "", "=", base64.RawStdEncoding.EncodeToString(mac(sha256.New, body)),
		" " + base64.StdEncoding.EncodeToString(mac(sha256.New, body)),
	} {
		f.Add(v, []byte(body))
	}
	shopify := mustVerifier(f, VerifyConfig{Scheme: SchemeShopify, Secrets: []string{"other-secret", fuzzSecret}})
	sha1V := mustVerifier(f, VerifyConfig{Scheme: SchemeHMAC, Secrets: []string{fuzzSecret}, Header: "x-sig", Algorithm: "sha1", Prefix: "sig="})
	sha512V := mustVerifier(f, VerifyConfig{Scheme: SchemeHMAC, Secrets: []string{fuzzSecret}, Header: "X-Sig", Algorithm: "sha512", Prefix: "sig="})
	f.Fuzz(func(t *testing.T, value string, body []byte) {
		err := shopify.Verify(http.Header{"X-Shopify-Hmac-Sha256": {value}}, body, testNow)
		want := base64.StdEncoding.EncodeToString(mac(sha256.New, string(body)))
		if err != nil {
			checkFuzzError(t, err, fuzzSecret, "other-secret")
		} else if value != want {
			t.Fatalf("shopify: accepted %q, want %s", value, want)
		}
		for _, c := range []struct {
			v       Verifier
			newHash func() hash.Hash
		}{{sha1V, sha1.New}, {sha512V, sha512.New}} {
			err := c.v.Verify(http.Header{"X-Sig": {value}}, body, testNow)
			want := "sig=" + hex.EncodeToString(mac(c.newHash, string(body)))
			if err != nil {
				checkFuzzError(t, err, fuzzSecret)
			} else if !strings.HasPrefix(value, "sig=") || !strings.EqualFold(value, want) {
				t.Fatalf("hmac: accepted %q, want %s", value, want)
			}
		}
	})
}

// FuzzSlackChallenge: for a Slack body, the url_verification answer exists
// exactly when encoding/json reads the body as an object whose "type" is
// "url_verification" and which has a scalar "challenge"; the answer is
// valid JSON, a one-member object, and carries that challenge back
// (invalid UTF-8 replaced, as encoding/json does).
func FuzzSlackChallenge(f *testing.F) {
	for _, b := range []string{
		`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`,
		`{"type":"url_verification","challenge":12}`,
		`{"type":"url_verification","challenge":"a\"b\\c\u0000\ud800"}`,
		"{\"type\":\"url_verification\",\"challenge\":\"\xff\xfe<>&\u2028\"}",
		`{"type":"url_verification"}`,
		`{"type":"event_callback","challenge":"x","event":{"type":"message"}}`,
		`{"type":"url_verification","challenge":"x"} trailing`,
		`{"type":"url_\u0076erification","challenge":"x"}`,
		`{"type":"url_verification","challenge":{"a":1}}`,
		`[]`, ``,
	} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		answer, ok := slackChallenge(body)
		typ, typOK := referencePointer(body, []string{"type"})
		challenge, chOK := referencePointer(body, []string{"challenge"})
		want := typOK && typ == "url_verification" && chOK
		if ok != want {
			t.Fatalf("body %q: handshake %v, encoding/json says type %q (%v), challenge %q (%v)", body, ok, typ, typOK, challenge, chOK)
		}
		if !ok {
			return
		}
		if !json.Valid(answer) || !utf8.Valid(answer) {
			t.Fatalf("body %q: answer %q is not valid JSON", body, answer)
		}
		var got map[string]any
		if err := json.Unmarshal(answer, &got); err != nil || len(got) != 1 {
			t.Fatalf("body %q: answer %q: %v", body, answer, err)
		}
		if got["challenge"] != strings.ToValidUTF8(challenge, "\ufffd") {
			t.Fatalf("body %q: answer %q, want challenge %q", body, answer, challenge)
		}
	})
}

// FuzzAcceptedBody: the 202 body quoting a provider's event ID (taken from
// a header, query parameter or JSON body) is the JSON encoding/json would
// write: valid UTF-8 JSON whose event_id is the ID with invalid UTF-8
// replaced byte by byte, as encoding/json writes the same string.
func FuzzAcceptedBody(f *testing.F) {
	for _, id := range []string{"evt_1NgGm2A", "caf\xe9", "a\"b\\c\x00\x1f\x7f", "\u2028<&>", "\xed\xa0\x80", "\xf4\x90\x80\x80", ""} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, eventID string) {
		b := acceptedBody("evt_01HZY", eventID)
		if !utf8.Valid(b) || !json.Valid(b) {
			t.Fatalf("%q: body %q is not valid UTF-8 JSON", eventID, b)
		}
		var got struct {
			ID      string `json:"id"`
			EventID string `json:"event_id"`
		}
		ref, _ := json.Marshal(eventID)
		var want string
		_ = json.Unmarshal(ref, &want)
		if err := json.Unmarshal(b, &got); err != nil || got.ID != "evt_01HZY" || got.EventID != want {
			t.Fatalf("%q: body %q decodes to %+v (%v)", eventID, b, got, err)
		}
	})
}
