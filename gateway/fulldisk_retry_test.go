package gateway

import (
	"path/filepath"
	"testing"

	"hookgate/internal/tmpfs"
)

// A gateway restarted on a disk below its write reserve refuses new events
// with 503 (nothing can be stored), but a provider's retry of an event it
// acknowledged before needs no write: SPEC section 3 gives it the first
// answer, 202 and Idempotent-Replayed. It got 503 (fixed): after a restart the
// store's table of recent keys is empty, so the retry goes to the writer,
// which refuses the whole batch for space before it reads the stored
// answer. Stripe, Shopify and the rest then count a failed delivery of an
// event that is stored and delivered (Shopify removes a subscription after
// repeated failures).
func TestRetryOfAnAcknowledgedEventAfterARestartOnANearlyFullDisk(t *testing.T) {
	mnt := tmpfs.Mount(t, "400m")
	dir := filepath.Join(mnt, "data")
	g := startGateway(t, gwOptions{dir: dir})
	body := []byte(`{"id":"acked","type":"x"}`)
	st, _, first := g.post("open", body, nil)
	if st != 202 {
		t.Fatalf("ingest: %d %s", st, first)
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	h := restartNearlyFull(t, mnt, dir)
	if st, _, b := h.post("open", []byte(`{"id":"new","type":"x"}`), nil); st != 503 {
		t.Fatalf("setup: a new event below the reserve: %d %s, want 503", st, b)
	}
	st, hdr, again := h.post("open", body, nil)
	if st != 202 || hdr.Get(headerReplayed) != "true" || string(again) != string(first) {
		t.Fatalf("the provider's retry of the acknowledged event: %d replayed=%q %s; want 202, Idempotent-Replayed, %s",
			st, hdr.Get(headerReplayed), again, first)
	}
}
