// Package outbound delivers accepted events to endpoints: it claims due
// deliveries from the store's outbox, signs them (Standard Webhooks), sends
// them through an SSRF-guarded HTTP client, decides what an answer means
// (succeeded, retry at a time, failed, failed and disable the endpoint) and
// writes that decision back to the store in one durable write.
//
// The store is the queue: every pending delivery, its attempt count, its
// backoff interval and its next due time are data in the store, never a
// sleeping goroutine, so a restart resumes every delivery on schedule.
package outbound

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"hookgate/storage"
)

// SecretPrefix starts every Standard Webhooks secret; the base64 key follows.
const SecretPrefix = "whsec_"

// secretBytes is the size of a generated key: 32 bytes, as Svix generates,
// within the 24-64 bytes Standard Webhooks recommends.
const secretBytes = 32

// ErrBadSecret is returned by DecodeSecret for a secret that is not
// "whsec_" followed by non-empty standard base64.
var ErrBadSecret = errors.New("invalid webhook secret")

// NewSecret returns a fresh Standard Webhooks secret: "whsec_" and the
// standard base64 of 32 random bytes. Endpoints configured without a secret
// get one, so that every delivery is signed.
func NewSecret() string {
	var b [secretBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b[:])
}

// DecodeSecret returns the HMAC key of a Standard Webhooks secret. Like the
// official libraries it also accepts the base64 without the "whsec_" prefix.
// The error never contains the secret.
func DecodeSecret(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, SecretPrefix))
	if err != nil {
		return nil, fmt.Errorf("%w: not standard base64 after %q", ErrBadSecret, SecretPrefix)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("%w: empty key", ErrBadSecret)
	}
	return key, nil
}

// Live reports whether a secret still signs at now: it never expires
// (ExpiresAt zero) or expires after now. After a rotation the old secret
// stays live for a grace period, so receivers can switch keys without
// rejecting a delivery.
func Live(s storage.Secret, now time.Time) bool {
	return s.ExpiresAt.IsZero() || s.ExpiresAt.After(now)
}

// Sign returns the webhook-signature header value of one attempt:
// "v1,<base64 HMAC-SHA256(key, "<msgID>.<unix ts>.<body>")>" for each live
// secret, space-separated, in the order given. Secrets that are expired or
// do not decode are skipped (config validation rejects the latter), so the
// result is "" when no secret can sign.
func Sign(msgID string, ts time.Time, body []byte, secrets []storage.Secret, now time.Time) string {
	var sb strings.Builder
	var stamp [20]byte
	unix := strconv.AppendInt(stamp[:0], ts.Unix(), 10)
	var sum [sha256.Size]byte
	for _, s := range secrets {
		if !Live(s, now) {
			continue
		}
		key, err := DecodeSecret(s.Value)
		if err != nil {
			continue
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(msgID))
		mac.Write([]byte{'.'})
		mac.Write(unix)
		mac.Write([]byte{'.'})
		mac.Write(body)
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString("v1,")
		sb.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(sum[:0])))
	}
	return sb.String()
}
