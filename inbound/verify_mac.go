package inbound

import (
	"crypto/hmac"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"hash"
	"sync"
	"time"
)

// Bounds on what a hostile request can make Verify do.
const (
	// maxSignatures is how many signatures of one header are considered; the rest are
	// ignored. A sender lists one per live secret, two during a rotation.
	maxSignatures = 16
	// maxMACSize is the largest HMAC any scheme produces (SHA-512).
	maxMACSize = sha512.Size
	// maxTimestampDigits bounds a signed Unix time: 12 digits reach the year 33658, so
	// parsing cannot overflow and time.Unix stays exact.
	maxTimestampDigits = 12
)

// Errors shared by the timestamped schemes. Every error Verify returns is a value fixed in
// advance, so none can leak a secret or a computed signature, and failing costs no allocation.
var (
	errBadTimestamp = fmt.Errorf("%w: timestamp is not a Unix time in seconds", ErrBadSignature)
	errTooOld       = fmt.Errorf("%w: too old", ErrStaleTimestamp)
	errTooNew       = fmt.Errorf("%w: in the future", ErrStaleTimestamp)
	errNoMatch      = fmt.Errorf("%w: matches no secret", ErrBadSignature)
)

// sigEncoding is how a scheme writes a signature in its header.
type sigEncoding uint8

const (
	encodingHex    sigEncoding = iota + 1 // hex, either case
	encodingBase64                        // standard alphabet, padded, canonical
)

// strictBase64 refuses non-zero padding bits, so one MAC has exactly one base64 form.
var strictBase64 = base64.StdEncoding.Strict()

// signatures holds the decoded candidate signatures of one request. It lives on the stack:
// parsing a header allocates nothing.
type signatures struct {
	enc  sigEncoding
	size int // MAC length; a candidate that decodes to another length is skipped
	seen int // candidates considered, at most maxSignatures
	n    int // candidates decoded, in sums[:n]
	sums [maxSignatures][maxMACSize]byte
}

// add decodes one candidate. Malformed ones are dropped, as another may still match; past
// maxSignatures every candidate is dropped.
func (s *signatures) add(encoded string) {
	if s.seen == maxSignatures {
		return
	}
	s.seen++
	dst := s.sums[s.n][:s.size]
	ok := false
	switch s.enc {
	case encodingHex:
		ok = decodeHexSig(dst, encoded)
	case encodingBase64:
		ok = decodeBase64Sig(dst, encoded)
	}
	if ok {
		s.n++
	}
}

// contains compares mac with every candidate in constant time.
func (s *signatures) contains(mac []byte) bool {
	for i := range s.n {
		if hmac.Equal(s.sums[i][:s.size], mac) {
			return true
		}
	}
	return false
}

// decodeHexSig decodes s into all of dst, or reports false.
func decodeHexSig(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := hexNibble(s[2*i])
		lo, ok2 := hexNibble(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func hexNibble(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// decodeBase64Sig decodes s into all of dst, or reports false. s is copied to the stack
// first: a []byte(s) conversion of that size would be a heap allocation per request.
func decodeBase64Sig(dst []byte, s string) bool {
	if len(s) != strictBase64.EncodedLen(len(dst)) {
		return false
	}
	var src [(maxMACSize + 2) / 3 * 4]byte
	var out [maxMACSize + 2]byte
	n, err := strictBase64.Decode(out[:], src[:copy(src[:], s)])
	if err != nil || n != len(dst) {
		return false
	}
	copy(dst, out[:n])
	return true
}

// keyring computes the expected HMAC of a message under each secret. Keyed hash states
// are pooled per secret: the key pads are derived once, not per request, and the hot
// path allocates nothing.
type keyring struct {
	size  int         // MAC length in bytes
	pools []sync.Pool // of *macState, one pool per secret
}

// macState is a keyed HMAC and the buffers it is fed from. The buffers live here rather
// than on the stack because hash.Hash.Write is an interface call: the compiler must
// assume its argument escapes.
type macState struct {
	h       hash.Hash
	sum     [maxMACSize]byte
	scratch [256]byte
}

func newKeyring(newHash func() hash.Hash, keys [][]byte) *keyring {
	k := &keyring{size: newHash().Size(), pools: make([]sync.Pool, len(keys))}
	for i, key := range keys {
		k.pools[i].New = func() any { return &macState{h: hmac.New(newHash, key)} }
	}
	return k
}

// match reports whether, under any secret, the HMAC of the concatenation of prefix and
// body is one of sigs.
func (k *keyring) match(sigs *signatures, body []byte, prefix ...string) bool {
	for i := range k.pools {
		pool := &k.pools[i]
		m := pool.Get().(*macState)
		m.h.Reset()
		for _, p := range prefix {
			m.writeString(p)
		}
		m.h.Write(body)
		ok := sigs.contains(m.h.Sum(m.sum[:0]))
		pool.Put(m)
		if ok {
			return true
		}
	}
	return false
}

// writeString feeds s to the hash through the scratch buffer, without converting it.
func (m *macState) writeString(s string) {
	for s != "" {
		n := copy(m.scratch[:], s)
		m.h.Write(m.scratch[:n])
		s = s[n:]
	}
}

// checkTimestamp parses a signed Unix time in seconds and checks it is within tol of now,
// both ways. Only plain digits are accepted: no sign, no space, no fraction.
func checkTimestamp(ts string, now time.Time, tol time.Duration) error {
	if ts == "" || len(ts) > maxTimestampDigits {
		return errBadTimestamp
	}
	var sec int64
	for i := range len(ts) {
		c := ts[i]
		if c < '0' || c > '9' {
			return errBadTimestamp
		}
		sec = sec*10 + int64(c-'0')
	}
	// Compare instants rather than subtract them: a difference of centuries would
	// saturate time.Duration and could pass for a small one.
	t := time.Unix(sec, 0)
	switch {
	case t.Before(now.Add(-tol)):
		return errTooOld
	case t.After(now.Add(tol)):
		return errTooNew
	}
	return nil
}

// headerErrors are the outcomes of a scheme's parse, fixed when the verifier is built so
// that they can name the header without allocating per request.
type headerErrors struct {
	missing   error // the header is absent
	malformed error // the header holds no usable signature
}

func newHeaderErrors(header string) headerErrors {
	return headerErrors{
		missing:   fmt.Errorf("%w: no %s header", ErrMissingSignature, header),
		malformed: fmt.Errorf("%w: malformed %s header", ErrBadSignature, header),
	}
}
