// Package inbound turns a provider's HTTP request into an event the gateway may accept: it checks
// the request's signature (verify*.go) and derives the event's ID and type (identify*.go). It
// knows nothing of storage or delivery.
package inbound

import (
	"cmp"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/textproto"
	"strings"
	"time"
)

// Scheme names, the values of VerifyConfig.Scheme and of the verify.scheme config key.
const (
	// SchemeStripe checks Stripe-Signature: a timestamp and hex HMAC-SHA256 of "<t>.<body>".
	SchemeStripe = "stripe"
	// SchemeGitHub checks X-Hub-Signature-256: "sha256=" and hex HMAC-SHA256 of the body.
	SchemeGitHub = "github"
	// SchemeShopify checks X-Shopify-Hmac-Sha256: base64 HMAC-SHA256 of the body.
	SchemeShopify = "shopify"
	// SchemeSlack checks X-Slack-Signature: "v0=" and hex HMAC-SHA256 of
	// "v0:<X-Slack-Request-Timestamp>:<body>".
	SchemeSlack = "slack"
	// SchemeStandardWebhooks checks webhook-signature (or svix-signature): base64
	// HMAC-SHA256 of "<id>.<timestamp>.<body>" keyed with a whsec_ secret.
	SchemeStandardWebhooks = "standard-webhooks"
	// SchemeHMAC checks a configured header carrying an HMAC of the body, for senders
	// that follow no named scheme.
	SchemeHMAC = "hmac"
	// SchemeNone accepts every request. It exists so that an unverified source is a
	// visible, explicit choice in the config rather than a forgotten block.
	SchemeNone = "none"
)

// Defaults NewVerifier applies to zero fields of a VerifyConfig.
const (
	// DefaultTolerance is how far a signed timestamp may be from now, in either
	// direction: the five minutes Stripe, Slack and Standard Webhooks recommend.
	DefaultTolerance = 5 * time.Minute
	// DefaultAlgorithm is the hash of the hmac scheme: what nearly every sender uses.
	DefaultAlgorithm = "sha256"
	// DefaultEncoding is the signature encoding of the hmac scheme.
	DefaultEncoding = "hex"
)

// Outcomes of Verify. Every error Verify returns wraps exactly one of them, so a caller
// branches with errors.Is; the wrapping text says which header or check failed and never
// contains a secret or a computed signature.
var (
	// ErrMissingSignature means the request lacks a header the scheme requires.
	ErrMissingSignature = errors.New("missing signature")
	// ErrBadSignature means a signature header is malformed or matches no secret.
	ErrBadSignature = errors.New("bad signature")
	// ErrStaleTimestamp means the signed timestamp is further than the tolerance from
	// now, in the past or in the future: a replay, or a sender with a wrong clock.
	ErrStaleTimestamp = errors.New("timestamp outside tolerance")
)

// HeaderGetter returns the value of a request header (case-insensitive name), "" if absent.
// It is all Verify needs of a request, so any HTTP stack can supply it; http.Header
// satisfies it.
type HeaderGetter interface{ Get(name string) string }

// HeaderFunc adapts a function, such as a closure over a Fiber ctx's c.Get, to HeaderGetter.
type HeaderFunc func(name string) string

// Get returns f(name).
func (f HeaderFunc) Get(name string) string { return f(name) }

// VerifyConfig is how one source's requests are signed: the verify block of a source in
// config.yaml. NewVerifier validates it once.
type VerifyConfig struct {
	// Scheme is one of the Scheme constants; required, "none" included.
	Scheme string
	// Secrets are the signing secrets; several allow rotation, any one may match.
	// Required and non-empty for every scheme but none, which takes no secret. Stripe,
	// GitHub, Shopify, Slack and hmac use each secret's bytes as the HMAC key;
	// standard-webhooks decodes "whsec_<base64>" (the prefix is optional, as in the
	// official libraries).
	Secrets []string
	// Tolerance is how far a signed timestamp may be from now in either direction, for
	// stripe, slack and standard-webhooks; other schemes sign no timestamp and ignore it.
	// 0 means DefaultTolerance.
	Tolerance time.Duration
	// Header names the header carrying the signature; hmac only, and required there.
	Header string
	// Algorithm is the HMAC hash, sha1, sha256 or sha512; hmac only, default sha256.
	Algorithm string
	// Encoding is how the signature is written, hex (either case) or base64 (standard
	// alphabet, padded); hmac only, default hex.
	Encoding string
	// Prefix is text the header value must start with, removed before decoding, such
	// as "sha256="; hmac only, default none.
	Prefix string
}

// Verifier checks that a request was signed by a holder of one of a source's secrets.
type Verifier interface {
	// Verify returns nil if the headers carry a valid signature of body, and for
	// timestamped schemes a timestamp within tolerance of now; otherwise an error
	// wrapping ErrMissingSignature, ErrBadSignature or ErrStaleTimestamp. body must be
	// the raw bytes as received. Safe for concurrent use; it never panics on hostile
	// headers and its work is bounded by their length.
	Verify(h HeaderGetter, body []byte, now time.Time) error
}

// ConfigError is one problem with a VerifyConfig. Field is the config key under verify
// ("secrets[1]", "algorithm"), so a config loader can point at the line. Problem never
// contains a secret.
type ConfigError struct {
	Field   string // config key under verify, with an index for a secret: "secrets[1]"
	Problem string // what is wrong and what would be right, in lower case
}

// Error returns "field: problem".
func (e *ConfigError) Error() string { return e.Field + ": " + e.Problem }

// NewVerifier validates cfg and returns the Verifier for its scheme, with the keys and
// everything else that does not depend on a request computed up front. On a bad cfg the
// error joins one *ConfigError per problem.
func NewVerifier(cfg VerifyConfig) (Verifier, error) {
	s, err := resolveVerifyConfig(cfg)
	if err != nil {
		return nil, err
	}
	switch cfg.Scheme {
	case SchemeStripe:
		return newStripeVerifier(s), nil
	case SchemeGitHub:
		return newBodyVerifier(githubSignatureHeader, "sha256=", s), nil
	case SchemeShopify:
		return newBodyVerifier(shopifySignatureHeader, "", s), nil
	case SchemeSlack:
		return newSlackVerifier(s), nil
	case SchemeStandardWebhooks:
		return newStandardVerifier(s), nil
	case SchemeHMAC:
		return newBodyVerifier(s.header, s.prefix, s), nil
	default: // SchemeNone: resolveVerifyConfig rejects every other value.
		return noneVerifier{}, nil
	}
}

// verifySettings is a validated VerifyConfig, in the form the verifiers use.
type verifySettings struct {
	keys      [][]byte         // HMAC keys, one per secret
	tolerance time.Duration    // > 0
	newHash   func() hash.Hash // HMAC hash
	encoding  sigEncoding      // how signatures are written
	header    string           // hmac: canonical header name
	prefix    string           // hmac: prefix of the header value
}

// verifyConfigCheck collects every problem of a VerifyConfig, so one run of check-config
// reports them all.
type verifyConfigCheck struct{ errs []error }

func (c *verifyConfigCheck) fail(field, format string, args ...any) {
	c.errs = append(c.errs, &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)})
}

// resolveVerifyConfig validates cfg, applies the defaults and decodes the secrets.
func resolveVerifyConfig(cfg VerifyConfig) (verifySettings, error) {
	var c verifyConfigCheck
	s := verifySettings{
		tolerance: cmp.Or(cfg.Tolerance, DefaultTolerance),
		newHash:   sha256.New,
		encoding:  encodingHex,
	}
	switch cfg.Scheme {
	case SchemeStripe, SchemeGitHub, SchemeSlack:
	case SchemeShopify, SchemeStandardWebhooks:
		s.encoding = encodingBase64
	case SchemeHMAC:
		resolveHMACFields(cfg, &s, &c)
	case SchemeNone:
		if len(cfg.Secrets) > 0 {
			c.fail("secrets", "must be empty with scheme none, which checks nothing")
		}
	case "":
		c.fail("scheme", "required (%s)", schemeList)
	default:
		c.fail("scheme", "unknown %q (%s)", cfg.Scheme, schemeList)
	}
	if cfg.Scheme != SchemeHMAC {
		rejectHMACFields(cfg, &c)
	}
	if cfg.Tolerance < 0 {
		c.fail("tolerance", "must not be negative")
	}
	if cfg.Scheme != SchemeNone {
		s.keys = decodeSecrets(cfg, &c)
	}
	return s, errors.Join(c.errs...)
}

// schemeList is quoted by the errors about Scheme.
const schemeList = "stripe, github, shopify, slack, standard-webhooks, hmac or none"

// resolveHMACFields validates the fields only the hmac scheme uses.
func resolveHMACFields(cfg VerifyConfig, s *verifySettings, c *verifyConfigCheck) {
	switch {
	case cfg.Header == "":
		c.fail("header", "required with scheme hmac")
	case !isHeaderName(cfg.Header):
		c.fail("header", "%q is not a valid header name", cfg.Header)
	default:
		s.header = textproto.CanonicalMIMEHeaderKey(cfg.Header)
	}
	switch cmp.Or(cfg.Algorithm, DefaultAlgorithm) {
	case "sha1":
		s.newHash = sha1.New
	case "sha256":
		s.newHash = sha256.New
	case "sha512":
		s.newHash = sha512.New
	default:
		c.fail("algorithm", "unknown %q (sha1, sha256 or sha512)", cfg.Algorithm)
	}
	switch cmp.Or(cfg.Encoding, DefaultEncoding) {
	case "hex":
		s.encoding = encodingHex
	case "base64":
		s.encoding = encodingBase64
	default:
		c.fail("encoding", "unknown %q (hex or base64)", cfg.Encoding)
	}
	s.prefix = cfg.Prefix
}

// rejectHMACFields refuses hmac-only fields on other schemes: they would be ignored, and a
// user who wrote them expects them to matter.
func rejectHMACFields(cfg VerifyConfig, c *verifyConfigCheck) {
	for _, f := range []struct{ name, value string }{
		{"header", cfg.Header}, {"algorithm", cfg.Algorithm},
		{"encoding", cfg.Encoding}, {"prefix", cfg.Prefix},
	} {
		if f.value != "" {
			c.fail(f.name, "only valid with scheme hmac")
		}
	}
}

// decodeSecrets turns the secrets into HMAC keys. An empty secret is refused: it is what an
// unset ${VAR} expands to, and an HMAC with an empty key is one anybody can compute.
func decodeSecrets(cfg VerifyConfig, c *verifyConfigCheck) [][]byte {
	if len(cfg.Secrets) == 0 {
		c.fail("secrets", "at least one is required with scheme %s", cfg.Scheme)
		return nil
	}
	keys := make([][]byte, 0, len(cfg.Secrets))
	for i, secret := range cfg.Secrets {
		field := fmt.Sprintf("secrets[%d]", i)
		if secret == "" {
			c.fail(field, "empty (an unset environment variable?)")
			continue
		}
		if cfg.Scheme != SchemeStandardWebhooks {
			keys = append(keys, []byte(secret))
			continue
		}
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, standardSecretPrefix))
		if err != nil || len(key) == 0 {
			// err is not shown: it quotes a position in the secret, and says no more than this.
			c.fail(field, "not a Standard Webhooks secret (whsec_ followed by base64)")
			continue
		}
		keys = append(keys, key)
	}
	return keys
}

// SecretProblems finds secrets of a new verify block (config.yaml, the
// admin API) that start or end with whitespace, where the scheme uses the
// secret's bytes as they are: no provider's secret does, and one read from
// a file or a secret store with its newline made every request fail to
// verify. (A Standard Webhooks secret is base64, whose decoding skips a
// newline.) Stored sources are not checked again: NewVerifier takes them
// as they were accepted.
func SecretProblems(scheme string, secrets []string) []*ConfigError {
	if scheme == SchemeStandardWebhooks || scheme == SchemeNone {
		return nil
	}
	var out []*ConfigError
	for i, s := range secrets {
		if s != "" && strings.TrimSpace(s) != s {
			out = append(out, &ConfigError{Field: fmt.Sprintf("secrets[%d]", i),
				Problem: "starts or ends with whitespace (a newline from a file or a secret store?)"})
		}
	}
	return out
}

// isHeaderName reports whether s is an RFC 9110 token, the syntax of a header name.
func isHeaderName(s string) bool {
	for i := range len(s) {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}

// noneVerifier is SchemeNone.
type noneVerifier struct{}

var _ Verifier = noneVerifier{}

// Verify accepts everything.
func (noneVerifier) Verify(HeaderGetter, []byte, time.Time) error { return nil }
