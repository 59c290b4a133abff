package badger

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"

	"hookgate/storage"
)

// Records on the hot path (events, deliveries, dedupe records) are encoded
// in a compact binary form: every ingest writes all three and every
// delivery reads and rewrites two, and JSON (with the body in base64) was a
// quarter of the gateway's CPU. Everything else is JSON, readable with any
// Badger tool.
//
// Binary layout: a version byte, then the fields in a fixed order: strings
// and byte slices as uvarint length + bytes, integers as varints, times as
// varint Unix nanoseconds (0 = the zero time).
//
// An event record is usually stored compressed: version codecS2, then the
// S2 block of everything a codecV1 record holds after its version byte.
// Smaller records make every later step cheaper (the log's sync is paid
// per page, and each byte is flushed and compacted several times): with
// provider-shaped JSON bodies the gateway spent 12% less CPU per ingest and
// its p99 fell from ~40 to ~29 ms in 30 s runs (docs/benchmarks.md). A record that
// does not shrink by an eighth is stored as codecV1.
const (
	codecV1 = 1
	codecS2 = 2
)

// maxEventRecord bounds what a compressed event record may claim to
// decode to, so that a damaged length cannot make a huge allocation. It
// is well above storage.MaxEventBody and the headers stored with a body:
// a record over it would be stored and never read again.
const maxEventRecord = 64 << 20

var errCodec = errors.New("badger: malformed record")

// encode encodes a record.
func encode(v any) ([]byte, error) {
	switch r := v.(type) {
	case *storage.Event:
		return encodeEvent(r), nil
	case *storage.Delivery:
		return encodeDelivery(r), nil
	case *dedupeRecord:
		return encodeDedupe(r), nil
	}
	return json.Marshal(v)
}

// decode decodes a record made by encode. Builds before
// binary records (commits a240969..4819047) stored the hot-path records as JSON
// too, under the same field names: such a record begins with '{', which
// no binary version byte is.
func decode(b []byte, v any) error {
	if len(b) > 0 && b[0] == '{' {
		return json.Unmarshal(b, v)
	}
	switch r := v.(type) {
	case *storage.Event:
		return decodeEvent(b, r)
	case *storage.Delivery:
		return decodeDelivery(b, r)
	case *dedupeRecord:
		return decodeDedupe(b, r)
	}
	return json.Unmarshal(b, v)
}

type enc []byte

func (e enc) str(s string) enc   { return append(binary.AppendUvarint(e, uint64(len(s))), s...) }
func (e enc) bytes(p []byte) enc { return append(binary.AppendUvarint(e, uint64(len(p))), p...) }
func (e enc) int(n int64) enc    { return binary.AppendVarint(e, n) }
func (e enc) time(t time.Time) enc {
	if t.IsZero() {
		return e.int(0)
	}
	// UnixNano is undefined outside 1678..2262: a dedupe window of
	// centuries (dedupe.ttl: 2500000h, "never forget") read back as a date
	// in the 1700s, expired, and every resend became a new event. Such a
	// time is kept as the nearest one that fits.
	switch {
	case t.After(maxNanoTime):
		return e.int(math.MaxInt64)
	case t.Before(minNanoTime):
		return e.int(math.MinInt64 + 1) // not 0, which is the zero time
	}
	return e.int(t.UnixNano())
}

// The times a record's int64 nanoseconds can hold.
var (
	maxNanoTime = time.Unix(0, math.MaxInt64)
	minNanoTime = time.Unix(0, math.MinInt64+1)
)

// dec reads what enc wrote; the first error sticks and zero values follow.
type dec struct {
	b   []byte
	err error
}

func (d *dec) int() int64 {
	if d.err != nil {
		return 0
	}
	n, k := binary.Varint(d.b)
	if k <= 0 {
		d.err = errCodec
		return 0
	}
	d.b = d.b[k:]
	return n
}

func (d *dec) bytes() []byte {
	if d.err != nil {
		return nil
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 || n > uint64(len(d.b)-k) {
		d.err = errCodec
		return nil
	}
	p := d.b[k : k+int(n)]
	d.b = d.b[k+int(n):]
	return p
}

func (d *dec) str() string { return string(d.bytes()) }

func (d *dec) time() time.Time {
	n := d.int()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func (d *dec) version() {
	if len(d.b) == 0 || d.b[0] != codecV1 {
		d.err = errCodec
		return
	}
	d.b = d.b[1:]
}

// plainEvents recycles encodeEvent's uncompressed buffers: the record
// kept is the compressed copy, so the plain one is garbage at once.
var plainEvents sync.Pool

func encodeEvent(ev *storage.Event) []byte {
	var e enc
	if p, ok := plainEvents.Get().(*enc); ok {
		e = (*p)[:0]
	}
	e = slices.Grow(e, 128+len(ev.Body)+64*len(ev.Headers))
	e = append(e, codecV1)
	e = e.str(ev.ID).str(ev.Tenant).str(ev.Source).str(ev.EventID).str(ev.Type).time(ev.ReceivedAt)
	e = e.str(ev.ContentType).str(ev.IdempotencyKey).int(int64(len(ev.Headers)))
	for k, v := range ev.Headers {
		e = e.str(k).str(v)
	}
	e = e.bytes(ev.Body)
	c := make([]byte, 1+s2.MaxEncodedLen(len(e)-1))
	c[0] = codecS2
	c = c[:1+len(s2.Encode(c[1:], e[1:]))]
	if len(c) > len(e)-len(e)/8 {
		return e
	}
	if cap(e) <= maxPooledEvent {
		plainEvents.Put(&e)
	}
	return c
}

// maxPooledEvent bounds the plain buffers plainEvents keeps.
const maxPooledEvent = 64 << 10

func decodeEvent(b []byte, ev *storage.Event) error {
	copyBody := true
	if len(b) > 0 && b[0] == codecS2 {
		n, err := s2.DecodedLen(b[1:])
		if err != nil || n > maxEventRecord {
			return errCodec
		}
		plain := make([]byte, 1+n)
		plain[0] = codecV1
		if _, err := s2.Decode(plain[1:], b[1:]); err != nil {
			return errCodec
		}
		b, copyBody = plain, false // the body may alias the fresh buffer
	}
	d := dec{b: b}
	d.version()
	ev.ID, ev.Tenant, ev.Source, ev.EventID, ev.Type = d.str(), d.str(), d.str(), d.str(), d.str()
	ev.ReceivedAt = d.time()
	ev.ContentType, ev.IdempotencyKey = d.str(), d.str()
	n := d.int()
	if n < 0 || n > int64(len(d.b)) {
		return errCodec
	}
	ev.Headers = make(map[string]string, n)
	for range n {
		k := d.str()
		ev.Headers[k] = d.str()
	}
	ev.Body = d.bytes()
	if copyBody {
		ev.Body = append([]byte(nil), ev.Body...)
	}
	return d.err
}

func encodeDelivery(dl *storage.Delivery) []byte {
	e := make(enc, 0, 192)
	e = append(e, codecV1)
	e = e.str(dl.ID).str(dl.Event).str(dl.Tenant).str(dl.Endpoint).str(dl.IdempotencyKey).str(string(dl.State))
	e = e.int(int64(dl.AttemptCount)).time(dl.CreatedAt).time(dl.NextAttemptAt).time(dl.LeaseUntil).time(dl.RetryFrom)
	e = e.int(int64(dl.RetryBase)).int(int64(dl.Interval)).str(dl.LastError).int(int64(dl.LastStatus))
	return e.time(dl.UpdatedAt)
}

func decodeDelivery(b []byte, dl *storage.Delivery) error {
	d := dec{b: b}
	d.version()
	dl.ID, dl.Event, dl.Tenant, dl.Endpoint, dl.IdempotencyKey = d.str(), d.str(), d.str(), d.str(), d.str()
	dl.State = storage.DeliveryState(d.str())
	dl.AttemptCount = clampInt(d.int())
	dl.CreatedAt, dl.NextAttemptAt, dl.LeaseUntil, dl.RetryFrom = d.time(), d.time(), d.time(), d.time()
	dl.RetryBase = clampInt(d.int())
	dl.Interval = time.Duration(d.int())
	dl.LastError = d.str()
	dl.LastStatus = clampInt(d.int())
	dl.UpdatedAt = d.time()
	return d.err
}

func encodeDedupe(r *dedupeRecord) []byte {
	e := make(enc, 0, 80+len(r.Response.Body))
	e = append(e, codecV1)
	e = e.bytes(r.Hash[:]).int(int64(r.Response.Status)).bytes(r.Response.Body).time(r.Expires)
	return e.str(r.Event)
}

func decodeDedupe(b []byte, r *dedupeRecord) error {
	d := dec{b: b}
	d.version()
	if h := d.bytes(); len(h) == len(r.Hash) {
		copy(r.Hash[:], h)
	} else if d.err == nil {
		d.err = errCodec
	}
	r.Response.Status = clampInt(d.int())
	r.Response.Body = append([]byte(nil), d.bytes()...)
	r.Expires = d.time()
	r.Event = d.str()
	return d.err
}

func clampInt(n int64) int {
	if n > math.MaxInt32 || n < math.MinInt32 {
		return 0
	}
	return int(n)
}
