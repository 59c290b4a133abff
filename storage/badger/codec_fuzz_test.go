package badger

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"hookgate/storage"
)

// FuzzDecode (codec_test.go) checks that any stored bytes decode
// without a panic. These targets check the stronger properties of the
// records read back from the store: every record the gateway can write
// decodes to what was written (events compressed or not, deliveries,
// dedupe records), and whatever bytes decode, decode the same again once
// re-encoded, so a record read, changed and written back loses nothing.

// fuzzTime is a time the codec must keep: whole nanoseconds from 1970,
// within int64 nanoseconds, never exactly the epoch (0 is the zero time).
func fuzzTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

func FuzzEventRecordRoundTrip(f *testing.F) {
	body := `{"id":"evt_1NgGm2A","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","amount":2000}}}`
	f.Add("evt_01HZY", "acme", "stripe", "evt_1NgGm2A", "invoice.paid", "application/json", "key",
		"Stripe-Signature\x00t=1,v1=ab\x00User-Agent\x00Stripe/1.0", []byte(body), int64(1_700_000_000_123_456_789))
	f.Add("evt_2", "", "", "caf\xe9", "", "", "", "", []byte(strings.Repeat(body, 20)), int64(1))
	f.Add("", "t", "s", "", "\n", "text/plain; charset=\xff", "", "a\x00\x00\x00", []byte{}, int64(-1))
	f.Fuzz(func(t *testing.T, id, tenant, source, eventID, typ, contentType, idemKey, headers string, body []byte, receivedNS int64) {
		ev := storage.Event{ID: id, Tenant: tenant, Source: source, EventID: eventID, Type: typ,
			ReceivedAt: fuzzTime(receivedNS), ContentType: contentType, IdempotencyKey: idemKey,
			Headers: map[string]string{}, Body: body}
		parts := strings.Split(headers, "\x00")
		for i := 0; i+1 < len(parts); i += 2 {
			ev.Headers[parts[i]] = parts[i+1]
		}
		rec := encodeEvent(&ev)
		var got storage.Event
		if err := decode(rec, &got); err != nil {
			t.Fatalf("decode(encode(%+v)) (version %d): %v", ev, rec[0], err)
		}
		if ev.Body == nil {
			ev.Body = []byte{}
		}
		if got.Body == nil {
			got.Body = []byte{}
		}
		if !reflect.DeepEqual(got, ev) {
			t.Fatalf("round trip (version %d):\n got %+v\nwant %+v", rec[0], got, ev)
		}
		// The decoded body must not alias the stored bytes: Badger reuses them.
		if len(got.Body) > 0 && rec[0] == codecV1 {
			saved := bytes.Clone(got.Body)
			for i := range rec {
				rec[i] ^= 0xff
			}
			if !bytes.Equal(got.Body, saved) {
				t.Fatal("decoded body aliases the record's bytes")
			}
		}
	})
}

// FuzzStoredRecordsAreStable: bytes that decode as a record re-encode to
// a record that decodes to the same thing.
func FuzzStoredRecordsAreStable(f *testing.F) {
	now := time.Unix(1_700_000_000, 5).UTC()
	f.Add(encodeEvent(&storage.Event{ID: "evt_1", Headers: map[string]string{"A": "b"}, Body: []byte("x"), ReceivedAt: now}))
	f.Add(encodeEvent(&storage.Event{ID: "evt_2", Body: bytes.Repeat([]byte(`{"a":1},`), 64), ReceivedAt: now}))
	f.Add(encodeDelivery(&storage.Delivery{ID: "dlv_1", Event: "evt_1", Tenant: "acme", Endpoint: "ep", IdempotencyKey: "k",
		State: storage.StateDelivering, AttemptCount: 3, CreatedAt: now, NextAttemptAt: now.Add(time.Second),
		LeaseUntil: now.Add(time.Minute), RetryFrom: now, RetryBase: 1, Interval: 5 * time.Second, LastError: "HTTP 503", LastStatus: 503, UpdatedAt: now}))
	f.Add(encodeDedupe(&dedupeRecord{Event: "evt_1", Response: storage.Response{Status: 202, Body: []byte(`{"id":"evt_1"}`)}, Expires: now}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev, ev2 storage.Event
		if decode(b, &ev) == nil {
			if err := decode(encodeEvent(&ev), &ev2); err != nil || !sameEvent(ev, ev2) {
				t.Fatalf("event %+v re-encoded decodes to %+v (%v)", ev, ev2, err)
			}
		}
		var dl, dl2 storage.Delivery
		if decode(b, &dl) == nil {
			if err := decode(encodeDelivery(&dl), &dl2); err != nil || !reflect.DeepEqual(dl, dl2) {
				t.Fatalf("delivery %+v re-encoded decodes to %+v (%v)", dl, dl2, err)
			}
		}
		var rec, rec2 dedupeRecord
		if decode(b, &rec) == nil {
			if err := decode(encodeDedupe(&rec), &rec2); err != nil || !reflect.DeepEqual(rec, rec2) {
				t.Fatalf("dedupe record %+v re-encoded decodes to %+v (%v)", rec, rec2, err)
			}
		}
	})
}

func sameEvent(a, b storage.Event) bool {
	if len(a.Body) == 0 && len(b.Body) == 0 {
		a.Body, b.Body = nil, nil
	}
	// A JSON record of an old build without headers decodes to a nil map,
	// its binary re-encoding to an empty one: the same headers.
	if len(a.Headers) == 0 && len(b.Headers) == 0 {
		a.Headers, b.Headers = nil, nil
	}
	return reflect.DeepEqual(a, b)
}
