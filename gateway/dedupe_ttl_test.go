package gateway

import (
	"context"
	"testing"

	"hookgate/storage"
)

// TestResendWithinACenturiesLongDedupeTTLIsReplayed: dedupe.ttl is only
// checked to be positive, so a TTL of centuries (an operator's "never
// forget", up to Go's 2562047h) is accepted. The resend of an event a
// moment later must get the first answer, replayed, and store nothing.
// Badger stored the dedupe record's expiry as int64 Unix nanoseconds,
// which overflow after 2262: the record read as expired at once and
// every resend became a new event with new deliveries.
func TestResendWithinACenturiesLongDedupeTTLIsReplayed(t *testing.T) {
	h := startGateway(t, gwOptions{ttl: "2500000h"})
	body := []byte(`{"id":"evt_forever","type":"x"}`)
	st1, _, b1 := h.post("open", body, nil)
	st2, hdr2, b2 := h.post("open", body, nil)
	if st1 != 202 || st2 != 202 || string(b1) != string(b2) || hdr2.Get("Idempotent-Replayed") != "true" {
		t.Errorf("resend: %d %s then %d %s (Idempotent-Replayed %q); want the first answer replayed",
			st1, b1, st2, b2, hdr2.Get("Idempotent-Replayed"))
	}
	evs, _, err := h.Store().ListEvents(context.Background(), storage.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 {
		t.Fatalf("%d events stored for one event id, want 1", len(evs))
	}
}
