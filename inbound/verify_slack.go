package inbound

import (
	"crypto/sha256"
	"encoding/json"
	"strings"
	"time"
)

// Slack's headers: X-Slack-Signature is "v0=<hex>", X-Slack-Request-Timestamp the Unix time.
const (
	slackSignatureHeader = "X-Slack-Signature"
	slackTimestampHeader = "X-Slack-Request-Timestamp"
)

var (
	errSlackSignature = newHeaderErrors(slackSignatureHeader)
	errSlackTimestamp = newHeaderErrors(slackTimestampHeader)
)

// slackVerifier is SchemeSlack: hex HMAC-SHA256 of "v0:<timestamp>:<body>", keyed with the
// app's signing secret.
type slackVerifier struct {
	keys      *keyring
	tolerance time.Duration
}

var _ Verifier = (*slackVerifier)(nil)

func newSlackVerifier(s verifySettings) *slackVerifier {
	return &slackVerifier{keys: newKeyring(sha256.New, s.keys), tolerance: s.tolerance}
}

// Verify checks X-Slack-Signature over the timestamp header and the body.
func (v *slackVerifier) Verify(h HeaderGetter, body []byte, now time.Time) error {
	sig, ts := h.Get(slackSignatureHeader), h.Get(slackTimestampHeader)
	switch {
	case sig == "":
		return errSlackSignature.missing
	case ts == "":
		return errSlackTimestamp.missing
	}
	encoded, ok := strings.CutPrefix(sig, "v0=")
	if !ok {
		return errSlackSignature.malformed
	}
	sigs := signatures{enc: encodingHex, size: sha256.Size}
	sigs.add(encoded)
	if sigs.n == 0 {
		return errSlackSignature.malformed
	}
	if err := checkTimestamp(ts, now, v.tolerance); err != nil {
		return err
	}
	if !v.keys.match(&sigs, body, "v0:", ts, ":") {
		return errNoMatch
	}
	return nil
}

// slackChallenge answers Slack's URL verification: when an Events API URL
// is set, Slack POSTs {"type":"url_verification","challenge":"…"} (signed
// like any event) and enables the URL only if the answer carries the
// challenge back. It is a handshake, not an event: nothing is stored.
func slackChallenge(body []byte) ([]byte, bool) {
	r := &Request{Body: body}
	if typ, _ := r.jsonValue([]string{"type"}); typ != "url_verification" {
		return nil, false
	}
	challenge, ok := r.jsonValue([]string{"challenge"})
	if !ok {
		return nil, false
	}
	answer, err := json.Marshal(struct {
		Challenge string `json:"challenge"`
	}{challenge})
	return answer, err == nil
}
