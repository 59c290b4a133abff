package badger

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"

	"hookgate/storage"
)

func TestCodecRoundTrip(t *testing.T) {
	now := time.Unix(1700000000, 123456789).UTC()
	ev := storage.Event{ID: "evt_1", Tenant: "t", Source: "s", EventID: "e/1", Type: "x.y", ReceivedAt: now,
		ContentType: "application/json", Headers: map[string]string{"A": "1", "B": ""}, Body: []byte{0, 0xff, 'a'}, IdempotencyKey: "msg_1"}
	var ev2 storage.Event
	if err := decode(encodeEvent(&ev), &ev2); err != nil || !reflect.DeepEqual(ev, ev2) {
		t.Fatalf("event: %v\n%+v\n%+v", err, ev, ev2)
	}
	dl := storage.Delivery{ID: "dlv_1", Event: "evt_1", Tenant: "t", Endpoint: "ep", IdempotencyKey: "msg_1", State: storage.StateDelivering,
		AttemptCount: 3, CreatedAt: now, NextAttemptAt: now.Add(time.Second), LeaseUntil: now.Add(time.Minute), RetryFrom: now,
		RetryBase: 1, Interval: 5 * time.Second, LastError: "HTTP 500", LastStatus: 500, UpdatedAt: now}
	var dl2 storage.Delivery
	if err := decode(encodeDelivery(&dl), &dl2); err != nil || !reflect.DeepEqual(dl, dl2) {
		t.Fatalf("delivery: %v\n%+v\n%+v", err, dl, dl2)
	}
	rec := dedupeRecord{Hash: [32]byte{1, 2, 3}, Response: storage.Response{Status: 202, Body: []byte(`{}`)}, Expires: now, Event: "evt_1"}
	var rec2 dedupeRecord
	if err := decode(encodeDedupe(&rec), &rec2); err != nil || !reflect.DeepEqual(rec, rec2) {
		t.Fatalf("dedupe: %v\n%+v\n%+v", err, rec, rec2)
	}
}

// Event records are stored compressed when that saves space, and as they
// are when it does not; both decode to the event that was encoded.
func TestCodecEventCompression(t *testing.T) {
	now := time.Unix(1700000000, 0).UTC()
	random := make([]byte, 2048)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	for _, c := range []struct {
		name    string
		body    []byte
		version byte
	}{
		{"json", bytes.Repeat([]byte(`{"object":"invoice","amount_due":1200,"currency":"usd","status":"paid"},`), 30), codecS2},
		{"random", random, codecV1},
		{"empty", nil, codecV1},
	} {
		ev := storage.Event{ID: "evt_1", Tenant: "t", Source: "s", EventID: "e1", Type: "x", ReceivedAt: now,
			ContentType: "application/json", Headers: map[string]string{"A": "1"}, Body: c.body}
		b := encodeEvent(&ev)
		if b[0] != c.version {
			t.Errorf("%s: stored as version %d, want %d", c.name, b[0], c.version)
		}
		if c.version == codecS2 && len(b) > len(c.body)/2 {
			t.Errorf("%s: %d-byte body stored in %d bytes", c.name, len(c.body), len(b))
		}
		var got storage.Event
		if err := decode(b, &got); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(ev, got) {
			t.Errorf("%s: decoded\n%+v\nwant\n%+v", c.name, got, ev)
		}
	}
}

// Records written before compression was added (codecV1) still decode: this
// is one, byte for byte, as the builds before compression wrote it.
func TestCodecReadsV1EventRecords(t *testing.T) {
	b, _ := hex.DecodeString("01056576745f320461636d6506737472697065076576745f6162630c696e766f6963652e706169648a80d0e2c6bfce972f106170706c69636174696f6e2f6a736f6e056d73675f3202105374726970652d5369676e617475726509743d312c76313d6162107b226964223a226576745f616263227d")
	want := storage.Event{ID: "evt_2", Tenant: "acme", Source: "stripe", EventID: "evt_abc", Type: "invoice.paid",
		ReceivedAt: time.Unix(1700000000, 5).UTC(), ContentType: "application/json",
		Headers: map[string]string{"Stripe-Signature": "t=1,v1=ab"}, Body: []byte(`{"id":"evt_abc"}`), IdempotencyKey: "msg_2"}
	var got storage.Event
	if err := decode(b, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, %v\nwant %+v", got, err, want)
	}
}

// A damaged compressed record is an error, not a panic, and a length that
// claims more than a record may hold allocates nothing.
func TestCodecRejectsDamagedCompressedEvents(t *testing.T) {
	ev := storage.Event{ID: "evt_1", Body: bytes.Repeat([]byte("abcdefgh"), 200)}
	good := encodeEvent(&ev)
	if good[0] != codecS2 {
		t.Fatalf("record not compressed: version %d", good[0])
	}
	huge := binary.AppendUvarint([]byte{codecS2}, maxEventRecord+1)
	huge = append(huge, 0)
	for name, b := range map[string][]byte{
		"truncated": good[:len(good)/2],
		"garbage":   append([]byte{codecS2}, bytes.Repeat([]byte{0xff}, 40)...),
		"huge":      huge,
		"empty":     {codecS2},
	} {
		var got storage.Event
		if err := decode(b, &got); err == nil {
			t.Errorf("%s: decoded without an error: %+v", name, got)
		}
	}
	// An S2 block of bytes that are not a v1 record's fields is an error too.
	bogus := append([]byte{codecS2}, s2.Encode(nil, []byte{0xff, 0xff, 0xff})...)
	var got storage.Event
	if err := decode(bogus, &got); err == nil {
		t.Errorf("bogus: decoded without an error: %+v", got)
	}
}

// FuzzDecode: a corrupt record is an error, never a panic or a huge
// allocation.
func FuzzDecode(f *testing.F) {
	now := time.Unix(1700000000, 0)
	f.Add(encodeEvent(&storage.Event{ID: "evt_1", Headers: map[string]string{"a": "b"}, Body: []byte("x"), ReceivedAt: now}))
	f.Add(encodeEvent(&storage.Event{ID: "evt_2", Body: bytes.Repeat([]byte(`{"a":1},`), 64), ReceivedAt: now}))
	f.Add(encodeDelivery(&storage.Delivery{ID: "dlv_1", CreatedAt: now}))
	f.Add(encodeDedupe(&dedupeRecord{Event: "evt_1"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev storage.Event
		var dl storage.Delivery
		var rec dedupeRecord
		_ = decode(b, &ev)
		_ = decode(b, &dl)
		_ = decode(b, &rec)
	})
}

// InvoiceBody is a provider-shaped JSON body of about size bytes with
// random ids and amounts, so that it compresses like a real payload, not
// like padding. Exported for the store's benchmarks (package badger_test).
func InvoiceBody(id string, size int) []byte {
	r := rand.New(rand.NewPCG(uint64(len(id)), uint64(size)))
	for _, c := range id {
		r = rand.New(rand.NewPCG(r.Uint64(), uint64(c)))
	}
	token := func(b []byte, n int) []byte {
		for range n {
			b = append(b, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"[r.IntN(62)])
		}
		return b
	}
	b := append([]byte(`{"id":`), strconv.Quote(id)...)
	b = append(b, `,"object":"event","type":"invoice.paid","data":{"object":{"id":"in_`...)
	b = append(token(b, 24), `","customer":"cus_`...)
	b = append(token(b, 14), `","lines":[`...)
	for i := 0; len(b) < size-60; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":"il_`...)
		b = append(token(b, 24), `","amount":`...)
		b = strconv.AppendInt(b, int64(100+r.IntN(50000)), 10)
		b = append(b, `,"price":"price_`...)
		b = append(token(b, 24), `"}`...)
	}
	return append(b, `]}}}`...)
}

// BenchmarkEventCodec: what compressing an event record costs per ingest,
// and decompressing it per delivery.
func BenchmarkEventCodec(b *testing.B) {
	ev := storage.Event{ID: "evt_1", Tenant: "default", Source: "stripe", EventID: "evt_123", Type: "invoice.paid",
		ReceivedAt: time.Unix(1700000000, 0), ContentType: "application/json",
		Headers: map[string]string{"Stripe-Signature": "t=1700000000,v1=" + strings.Repeat("ab", 32)}, Body: InvoiceBody("evt_123", 1024)}
	rec := encodeEvent(&ev)
	b.Logf("record %d bytes for a %d-byte body (version %d)", len(rec), len(ev.Body), rec[0])
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			encodeEvent(&ev)
		}
	})
	b.Run("decode", func(b *testing.B) {
		var got storage.Event
		for b.Loop() {
			if err := decodeEvent(rec, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}
