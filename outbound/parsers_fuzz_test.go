package outbound

import (
	"bytes"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"hookgate/storage"
)

// Fuzz targets for what the delivery path reads from outside the process: a receiver's answer (status and Retry-After, as Decide
// takes them; the response body excerpt), the addresses DNS returns
// (Blocked), and provider data copied into a header (headerValue).

// retryAfterDigits is RFC 9110's delay-seconds: 1*DIGIT.
var retryAfterDigits = regexp.MustCompile(`^[0-9]+$`)

// refRetryAfter is the test's own reading of a Retry-After value.
func refRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v) // a header value arrives with no CR or LF; other blanks are OWS
	if retryAfterDigits.MatchString(v) {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > 1<<30 { // past 2^64-1 too: the longest wait
			return time.Duration(1<<30) * time.Second, true
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		if t.Before(now) {
			return 0, true
		}
		return t.Sub(now), true
	}
	return 0, false
}

// FuzzDecide: whatever status and Retry-After a receiver answers, and
// whatever backoff state is persisted, the verdict follows SPEC section 4
// (2xx delivered, 410 disables, anything else retried or failed), a retry
// is never sooner than a 429/503's Retry-After (capped at max_interval),
// never later than the policy allows (max_interval with jitter, or the
// Retry-After capped at max_interval), and never past max_elapsed.
func FuzzDecide(f *testing.F) {
	f.Add(uint16(200), "", false, uint8(0), int64(0), uint32(0), false)
	f.Add(uint16(503), "120", false, uint8(3), int64(20000), uint32(60), false)
	f.Add(uint16(429), "Sun, 06 Nov 1994 08:49:37 GMT", false, uint8(1), int64(5000), uint32(1), true)
	f.Add(uint16(429), "Fri, 31 Dec 9999 23:59:59 GMT", false, uint8(29), int64(3600000), uint32(86000), false)
	f.Add(uint16(503), "18446744073709551616", false, uint8(2), int64(1), uint32(0), true)
	f.Add(uint16(410), "", false, uint8(0), int64(0), uint32(0), false)
	f.Add(uint16(0), "5", true, uint8(0), int64(-5), uint32(0), false)
	f.Add(uint16(302), " 7 ", false, uint8(10), int64(1<<62), uint32(1<<31), true)
	f.Add(uint16(999), "0", false, uint8(0), int64(0), uint32(0), false)
	small := storage.RetryPolicy{InitialInterval: 100 * time.Millisecond, Multiplier: 3, MaxInterval: 10 * time.Second,
		Randomization: 1, MaxAttempts: 12, MaxElapsed: time.Hour}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, status uint16, retryAfter string, transportErr bool, attempts uint8, intervalMS int64, elapsedS uint32, useSmall bool) {
		p := DefaultRetryPolicy
		if useSmall {
			p = small
		}
		interval := time.Duration(intervalMS) * time.Millisecond
		if intervalMS > int64(p.MaxInterval/time.Millisecond) || intervalMS < 0 {
			interval = p.MaxInterval // a persisted interval is at most max_interval
		}
		from := now.Add(-time.Duration(elapsedS%uint32(p.MaxElapsed/time.Second+1)) * time.Second)
		d := &storage.Delivery{AttemptCount: int(attempts), CreatedAt: from, RetryFrom: from, Interval: interval}
		a := Answer{StatusCode: int(status % 1000), RetryAfter: retryAfter}
		if transportErr {
			a = Answer{Err: io.ErrUnexpectedEOF, RetryAfter: retryAfter}
		}
		dec := Decide(p, d, a, now)
		ok2xx := a.Err == nil && a.StatusCode >= 200 && a.StatusCode < 300
		switch {
		case ok2xx:
			if dec.Verdict != VerdictSucceeded {
				t.Fatalf("%+v: verdict %s, want succeeded", a, dec.Verdict)
			}
			return
		case a.Err == nil && a.StatusCode == http.StatusGone:
			if dec.Verdict != VerdictDisable {
				t.Fatalf("%+v: verdict %s, want disabled", a, dec.Verdict)
			}
			return
		case dec.Verdict == VerdictFailed:
			if dec.Reason == "" {
				t.Fatalf("%+v: failed without a reason", a)
			}
			return
		case dec.Verdict != VerdictRetry:
			t.Fatalf("%+v: verdict %s, want retry or failed", a, dec.Verdict)
		}
		if int(attempts)+1 >= p.MaxAttempts {
			t.Fatalf("%+v: retry after attempt %d of max_attempts %d", a, int(attempts)+1, p.MaxAttempts)
		}
		wait := dec.NextAttemptAt.Sub(now)
		if wait < 0 || dec.NextAttemptAt.Sub(from) > p.MaxElapsed {
			t.Fatalf("%+v: next attempt in %s (%s after the first), max_elapsed %s", a, wait, dec.NextAttemptAt.Sub(from), p.MaxElapsed)
		}
		if dec.Interval <= 0 || dec.Interval > p.MaxInterval {
			t.Fatalf("%+v: persisted interval %s outside (0, %s]", a, dec.Interval, p.MaxInterval)
		}
		upper := time.Duration(float64(dec.Interval) * (1 + p.Randomization))
		asked, has := refRetryAfter(retryAfter, now)
		honoured := has && a.Err == nil && (a.StatusCode == 429 || a.StatusCode == 503)
		if honoured {
			upper = max(upper, min(asked, p.MaxInterval))
			if floor := min(asked, p.MaxInterval); wait < floor {
				t.Fatalf("%+v: retry in %s, sooner than Retry-After %q asks (%s, capped at %s)", a, wait, retryAfter, asked, p.MaxInterval)
			}
		}
		if wait > upper+time.Millisecond {
			t.Fatalf("%+v (Retry-After honoured: %v): retry in %s, more than %s", a, honoured, wait, upper)
		}
	})
}

// FuzzReadExcerpt: the excerpt of a receiver's response is valid UTF-8 of
// at most 1 KiB plus what replacing invalid bytes adds; for a valid UTF-8
// body it is the longest prefix of whole characters within 1 KiB.
func FuzzReadExcerpt(f *testing.F) {
	for _, b := range []string{
		`{"ok":true}`, "", strings.Repeat("é", 600), strings.Repeat("a", 1023) + "€", strings.Repeat("a", 1022) + "😀",
		"\xff\xfe", strings.Repeat("a", 1024) + "\xff", strings.Repeat("x", 70000),
	} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := readExcerpt(io.NopCloser(bytes.NewReader(body)))
		if err != nil {
			t.Fatalf("readExcerpt: %v", err)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("excerpt %q is not valid UTF-8", got)
		}
		if !utf8.Valid(body) {
			return
		}
		want := body[:min(len(body), responseExcerpt)]
		for !utf8.Valid(want) {
			want = want[:len(want)-1]
		}
		if got != string(want) {
			t.Fatalf("body of %d bytes: excerpt of %d bytes, want the %d-byte prefix", len(body), len(got), len(want))
		}
	})
}

// FuzzHeaderValue: an event type or Content-Type a provider sent fits in a
// header net/http will send (no control byte but tab), is unchanged when it
// already fitted, and percent-decodes back to the original when it did not.
func FuzzHeaderValue(f *testing.F) {
	for _, s := range []string{"invoice.paid", "orders/create", "a\nb", "100%\r\n", "\x00\x7f\t", "é\x01", "%0A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := headerValue(v)
		fits := func(s string) bool {
			for i := 0; i < len(s); i++ {
				if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
					return false
				}
			}
			return true
		}
		if !fits(got) {
			t.Fatalf("headerValue(%q) = %q, which net/http refuses", v, got)
		}
		if fits(v) {
			if got != v {
				t.Fatalf("headerValue(%q) = %q, want it unchanged", v, got)
			}
			return
		}
		back, err := url.PathUnescape(got)
		if err != nil || back != v {
			t.Fatalf("headerValue(%q) = %q, which decodes to %q (%v)", v, got, back, err)
		}
	})
}

// FuzzBlocked: every address an endpoint's DNS may return that netip
// itself classifies as loopback, private, link-local, multicast or
// unspecified is refused, in every IPv6 spelling of it (IPv4-mapped,
// NAT64, 6to4), with or without a zone; and a refusal always says why.
func FuzzBlocked(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "10.1.2.3", "::1", "::ffff:192.168.1.1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::",
		"fe80::1%eth0", "93.184.216.34", "2606:4700::1111", "100.64.0.1", "ff02::1", "0.0.0.0", "fd00::1", "::", "169.254.169.254"} {
		f.Add([]byte(netip.MustParseAddr(s).AsSlice()), "")
	}
	f.Add([]byte{254, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, "eth0")
	f.Fuzz(func(t *testing.T, raw []byte, zone string) {
		addr, ok := netip.AddrFromSlice(raw)
		if !ok {
			return
		}
		if addr.Is6() && zone != "" {
			addr = addr.WithZone(zone)
		}
		check := func(a netip.Addr, what string) {
			reason, blocked := Blocked(a)
			if blocked && reason == "" {
				t.Fatalf("%s %s blocked without a reason", what, a)
			}
			u := a.Unmap()
			special := u.IsLoopback() || u.IsPrivate() || u.IsLinkLocalUnicast() || u.IsLinkLocalMulticast() ||
				u.IsMulticast() || u.IsInterfaceLocalMulticast() || u.IsUnspecified()
			if special && !blocked {
				t.Fatalf("%s %s is special to netip but not blocked", what, a)
			}
		}
		check(addr, "address")
		if v4 := addr.Unmap(); v4.Is4() {
			b := v4.As4()
			mapped := netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]})
			nat64 := netip.AddrFrom16([16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]})
			sixto4 := netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: b[0], 3: b[1], 4: b[2], 5: b[3], 15: 1})
			r4, b4 := Blocked(v4)
			for _, a := range []netip.Addr{mapped, nat64, sixto4} {
				if r, bl := Blocked(a); bl != b4 || bl && r != r4 {
					t.Fatalf("%s: %v %q, but %s: %v %q", v4, b4, r4, a, bl, r)
				}
			}
		}
	})
}
