package badger

import (
	"reflect"
	"testing"
	"time"

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

// FuzzDecode: a corrupt record is an error, never a panic or a huge
// allocation.
func FuzzDecode(f *testing.F) {
	now := time.Unix(1700000000, 0)
	f.Add(encodeEvent(&storage.Event{ID: "evt_1", Headers: map[string]string{"a": "b"}, Body: []byte("x"), ReceivedAt: now}))
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
