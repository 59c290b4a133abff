package inbound

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
)

// standardSecretPrefix starts a Standard Webhooks secret; the base64 key follows.
const standardSecretPrefix = "whsec_"

// standardHeaders names the three headers of Standard Webhooks, or of Svix, which
// predates the standard and uses the same format under other names.
type standardHeaders struct{ id, timestamp, signature string }

var (
	standardNames = standardHeaders{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"}
	svixNames     = standardHeaders{"Svix-Id", "Svix-Timestamp", "Svix-Signature"}

	errStandardMissing = fmt.Errorf("%w: need webhook-id, webhook-timestamp and webhook-signature (or svix-*)",
		ErrMissingSignature)
	errStandardNoV1 = fmt.Errorf("%w: signature header has no valid v1,", ErrBadSignature)
)

// standardVerifier is SchemeStandardWebhooks: base64 HMAC-SHA256 of "<id>.<timestamp>.<body>"
// keyed with the decoded whsec_ secret. The signature header lists space-separated
// "<version>,<signature>" entries; only v1 (symmetric) is checked, v1a (asymmetric) and
// unknown versions are skipped.
type standardVerifier struct {
	keys      *keyring
	tolerance time.Duration
}

var _ Verifier = (*standardVerifier)(nil)

func newStandardVerifier(s verifySettings) *standardVerifier {
	return &standardVerifier{keys: newKeyring(sha256.New, s.keys), tolerance: s.tolerance}
}

// Verify reads the webhook-* headers, or the svix-* ones when no webhook-* header is
// present; the two families are never mixed.
func (v *standardVerifier) Verify(h HeaderGetter, body []byte, now time.Time) error {
	id, ts, sig := h.Get(standardNames.id), h.Get(standardNames.timestamp), h.Get(standardNames.signature)
	if id == "" && ts == "" && sig == "" {
		id, ts, sig = h.Get(svixNames.id), h.Get(svixNames.timestamp), h.Get(svixNames.signature)
	}
	if id == "" || ts == "" || sig == "" {
		return errStandardMissing
	}
	sigs := signatures{enc: encodingBase64, size: sha256.Size}
	for rest := sig; rest != ""; {
		var entry string
		entry, rest, _ = strings.Cut(rest, " ")
		if encoded, ok := strings.CutPrefix(entry, "v1,"); ok {
			sigs.add(encoded)
		}
	}
	if sigs.n == 0 {
		return errStandardNoV1
	}
	if err := checkTimestamp(ts, now, v.tolerance); err != nil {
		return err
	}
	if !v.keys.match(&sigs, body, id, ".", ts, ".") {
		return errNoMatch
	}
	return nil
}
