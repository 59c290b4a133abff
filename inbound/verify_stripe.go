package inbound

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
)

// stripeSignatureHeader is Stripe's header: "t=<unix>,v1=<hex>[,v1=<hex>…][,v0=…]".
const stripeSignatureHeader = "Stripe-Signature"

var (
	errStripeHeaders      = newHeaderErrors(stripeSignatureHeader)
	errStripeNoTimestamp  = fmt.Errorf("%w: %s has no t=", ErrBadSignature, stripeSignatureHeader)
	errStripeTwoTimestamp = fmt.Errorf("%w: %s has several t=", ErrBadSignature, stripeSignatureHeader)
	errStripeNoV1         = fmt.Errorf("%w: %s has no valid v1=", ErrBadSignature, stripeSignatureHeader)
)

// stripeVerifier is SchemeStripe: hex HMAC-SHA256 of "<t>.<body>", keyed with the whole
// whsec_ secret string as Stripe does. Stripe sends one v1 per live secret during an
// endpoint secret roll; any may match. v0 (test-mode legacy) is ignored.
type stripeVerifier struct {
	keys      *keyring
	tolerance time.Duration
}

var _ Verifier = (*stripeVerifier)(nil)

func newStripeVerifier(s verifySettings) *stripeVerifier {
	return &stripeVerifier{keys: newKeyring(sha256.New, s.keys), tolerance: s.tolerance}
}

// Verify checks Stripe-Signature: first its shape, then the timestamp (cheap, and it
// turns a replay away before any HMAC is computed), then the signatures.
func (v *stripeVerifier) Verify(h HeaderGetter, body []byte, now time.Time) error {
	header := h.Get(stripeSignatureHeader)
	if header == "" {
		return errStripeHeaders.missing
	}
	sigs := signatures{enc: encodingHex, size: sha256.Size}
	ts, err := parseStripeHeader(header, &sigs)
	if err != nil {
		return err
	}
	if err := checkTimestamp(ts, now, v.tolerance); err != nil {
		return err
	}
	if !v.keys.match(&sigs, body, ts, ".") {
		return errNoMatch
	}
	return nil
}

// parseStripeHeader returns the t= value and adds every v1= value to sigs. Items of other
// keys and items without "=" are skipped, as Stripe may add schemes.
func parseStripeHeader(header string, sigs *signatures) (ts string, err error) {
	seenT := false
	for rest := header; rest != ""; {
		var item string
		item, rest, _ = strings.Cut(rest, ",")
		key, value, _ := strings.Cut(item, "=")
		switch key {
		case "t":
			if seenT {
				return "", errStripeTwoTimestamp
			}
			ts, seenT = value, true
		case "v1":
			sigs.add(value)
		}
	}
	switch {
	case !seenT:
		return "", errStripeNoTimestamp
	case sigs.n == 0:
		return "", errStripeNoV1
	}
	return ts, nil
}
