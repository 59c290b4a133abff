package outbound

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"hookgate/storage"
)

// verifyWith checks a signature header with the official Standard Webhooks
// library, as a receiver holding secret would.
func verifyWith(t *testing.T, secret, msgID string, ts time.Time, sig string, body []byte) error {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(HeaderWebhookID, msgID)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderWebhookSignature, sig)
	return wh.Verify(body, h)
}

func TestSignVerifiesWithOfficialLibraryDuringRotation(t *testing.T) {
	now := time.Now()
	oldSecret, newSecret, expired := NewSecret(), NewSecret(), NewSecret()
	secrets := []storage.Secret{
		{Value: newSecret},
		{Value: oldSecret, ExpiresAt: now.Add(time.Hour)}, // rotated, still in its grace period
		{Value: expired, ExpiresAt: now.Add(-time.Second)},
	}
	body := []byte("{\"a\":\"\xff\xfe not utf-8\"}\n")
	sig := Sign("msg_abc", now, body, secrets, now)

	if parts := strings.Split(sig, " "); len(parts) != 2 {
		t.Fatalf("want one v1 signature per live secret (2), got %q", sig)
	}
	for _, s := range []string{newSecret, oldSecret} {
		if err := verifyWith(t, s, "msg_abc", now, sig, body); err != nil {
			t.Errorf("live secret does not verify: %v", err)
		}
	}
	if err := verifyWith(t, expired, "msg_abc", now, sig, body); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("expired secret must not sign, verify = %v", err)
	}
	if err := verifyWith(t, newSecret, "msg_abc", now, sig, append(body, ' ')); err == nil {
		t.Error("a changed body verified")
	}
	if err := verifyWith(t, newSecret, "msg_abd", now, sig, body); err == nil {
		t.Error("a changed message id verified")
	}
}

func TestSignWithoutLiveSecretIsEmpty(t *testing.T) {
	now := time.Now()
	secrets := []storage.Secret{{Value: NewSecret(), ExpiresAt: now}, {Value: "whsec_!!notbase64"}}
	if sig := Sign("msg", now, nil, secrets, now); sig != "" {
		t.Fatalf("Sign = %q, want empty", sig)
	}
}

func TestNewSecret(t *testing.T) {
	a, b := NewSecret(), NewSecret()
	if a == b {
		t.Fatal("two secrets are equal")
	}
	if !strings.HasPrefix(a, SecretPrefix) {
		t.Fatalf("secret %q lacks %s", a, SecretPrefix)
	}
	key, err := DecodeSecret(a)
	if err != nil || len(key) != 32 {
		t.Fatalf("DecodeSecret = %d bytes, %v; want 32", len(key), err)
	}
}

func TestDecodeSecret(t *testing.T) {
	raw := []byte("0123456789abcdef0123456789abcdef")
	enc := base64.StdEncoding.EncodeToString(raw)
	for _, tc := range []struct {
		in   string
		want []byte
	}{
		{SecretPrefix + enc, raw},
		{enc, raw}, // the official libraries accept the bare base64 too
		{SecretPrefix + "not base64!", nil},
		{SecretPrefix, nil},
		{"", nil},
	} {
		got, err := DecodeSecret(tc.in)
		if tc.want == nil {
			if !errors.Is(err, ErrBadSecret) {
				t.Errorf("DecodeSecret(%q) err = %v, want ErrBadSecret", tc.in, err)
			}
			continue
		}
		if err != nil || string(got) != string(tc.want) {
			t.Errorf("DecodeSecret(%q) = %q, %v", tc.in, got, err)
		}
	}
}

func TestDecodeSecretErrorDoesNotEchoTheSecret(t *testing.T) {
	secret := SecretPrefix + "c2VjcmV0LXZhbHVl!" // base64 of a secret, one bad byte at the end
	if _, err := DecodeSecret(secret); err == nil || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Fatalf("err = %v; want an error that does not contain the secret", err)
	}
}

func BenchmarkSign(b *testing.B) {
	now := time.Now()
	secrets := []storage.Secret{{Value: NewSecret()}, {Value: NewSecret(), ExpiresAt: now.Add(time.Hour)}}
	body := []byte(strings.Repeat(`{"k":"v"},`, 200)) // 2 KB
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		_ = Sign("msg_0123456789abcdefghjkmnpqrs", now, body, secrets, now)
	}
}
