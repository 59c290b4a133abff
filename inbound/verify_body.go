package inbound

import (
	"strings"
	"time"
)

// Signature headers of the schemes that sign the body alone, canonical so that
// http.Header.Get need not canonicalise them per request.
const (
	githubSignatureHeader  = "X-Hub-Signature-256"
	shopifySignatureHeader = "X-Shopify-Hmac-Sha256"
)

// bodyVerifier checks one signature of the raw body, in one header, after a fixed prefix:
// GitHub ("sha256=", hex), Shopify (base64) and the generic hmac scheme. No timestamp is
// signed, so these schemes cannot refuse a replay; the event-ID dedupe does.
type bodyVerifier struct {
	header string
	prefix string
	enc    sigEncoding
	keys   *keyring
	errs   headerErrors
}

var _ Verifier = (*bodyVerifier)(nil)

func newBodyVerifier(header, prefix string, s verifySettings) *bodyVerifier {
	return &bodyVerifier{
		header: header,
		prefix: prefix,
		enc:    s.encoding,
		keys:   newKeyring(s.newHash, s.keys),
		errs:   newHeaderErrors(header),
	}
}

// Verify checks the header against HMAC(secret, body); now is unused.
func (v *bodyVerifier) Verify(h HeaderGetter, body []byte, _ time.Time) error {
	value := h.Get(v.header)
	if value == "" {
		return v.errs.missing
	}
	encoded, ok := strings.CutPrefix(value, v.prefix)
	if !ok {
		return v.errs.malformed
	}
	sigs := signatures{enc: v.enc, size: v.keys.size}
	sigs.add(encoded)
	if sigs.n == 0 {
		return v.errs.malformed
	}
	if !v.keys.match(&sigs, body) {
		return errNoMatch
	}
	return nil
}
