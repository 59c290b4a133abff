package storage

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"time"
)

// idEncoding is lowercase Crockford-like base32 without padding; its
// alphabet is in ASCII order, so encoded IDs sort like their bytes.
var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewID returns prefix + a 26-character ID that sorts by creation time,
// like a ULID: 48 bits of milliseconds, 20 bits of the nanoseconds within
// that millisecond, then 60 random bits. Time-ordered IDs make "newest
// first" a reverse key scan and keep cursors stable while new records
// arrive; the sub-millisecond part keeps records made in one millisecond
// in the order of their times (received_at, created_at), which are taken
// from the same t. (IDs made by older builds have random bits there, so
// those of one millisecond sort at random among themselves.)
func NewID(prefix string, t time.Time) string {
	var rnd [10]byte
	_, _ = rand.Read(rnd[:])
	return timeID(prefix, t, rnd[:])
}

// KeyedID is NewID with its random bits taken from a hash of parts: an ID
// in time order that IsKeyedID can tell was made for those parts. The admin
// API names the deliveries of an event replay under an Idempotency-Key
// with it, so that the request run again after a crash finds those its
// first run made, whenever that was.
func KeyedID(prefix string, t time.Time, parts ...string) string {
	return timeID(prefix, t, hashParts(parts...)[:10])
}

// IsKeyedID reports whether id was made by KeyedID with prefix and parts
// (at any time).
func IsKeyedID(id, prefix string, parts ...string) bool {
	if len(id) != len(prefix)+26 || id[:len(prefix)] != prefix {
		return false
	}
	b, err := idEncoding.DecodeString(id[len(prefix):])
	if err != nil || len(b) != 16 {
		return false
	}
	h := hashParts(parts...)
	// timeID keeps the low 4 bits of byte 8 and bytes 9-15 of rnd.
	return b[8]&0x0f == h[2]&0x0f && string(b[9:]) == string(h[3:10])
}

// timeID is prefix + 48 bits of t's milliseconds, 20 bits of its
// nanoseconds within that millisecond, and the last 60 bits of rnd (10
// bytes).
func timeID(prefix string, t time.Time, rnd []byte) string {
	var b [16]byte
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	copy(b[6:], rnd)
	sub := uint32(t.Nanosecond() % 1e6) // < 2^20
	b[6] = byte(sub >> 12)
	b[7] = byte(sub >> 4)
	b[8] = byte(sub<<4) | b[8]&0x0f
	return prefix + idEncoding.EncodeToString(b[:])
}

// IDTime returns the creation time encoded in an ID made by NewID with the
// given prefix; ok is false when id is not such an ID.
func IDTime(prefix, id string) (t time.Time, ok bool) {
	if len(id) != len(prefix)+26 || id[:len(prefix)] != prefix {
		return time.Time{}, false
	}
	b, err := idEncoding.DecodeString(id[len(prefix):])
	if err != nil || len(b) != 16 {
		return time.Time{}, false
	}
	ms := uint64(binary.BigEndian.Uint16(b[0:2]))<<32 | uint64(binary.BigEndian.Uint32(b[2:6]))
	return time.UnixMilli(int64(ms)).UTC(), true
}

// IdempotencyKey is the outbound Idempotency-Key (and Standard Webhooks
// webhook-id) of a logical event: a pure function of (tenant, source,
// provider event ID), so every attempt, retry, replay and restart carries
// the same key, even after the dedupe window has expired, and every
// endpoint sees the same one.
func IdempotencyKey(tenant, source, eventID string) string {
	return "msg_" + idEncoding.EncodeToString(hashParts(tenant, source, eventID)[:20])
}

// DerivedID returns prefix + a 26-character ID that is a pure function of
// parts, in NewID's alphabet and length but without its time order. The
// admin API names what a POST under an Idempotency-Key creates with it, so
// that the request run again finds what its first run made.
func DerivedID(prefix string, parts ...string) string {
	return prefix + idEncoding.EncodeToString(hashParts(parts...)[:16])
}

// hashParts is SHA-256 over the parts, each length-prefixed so that no two
// lists share an encoding.
func hashParts(parts ...string) []byte {
	h := sha256.New()
	for _, p := range parts {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return h.Sum(nil)
}
