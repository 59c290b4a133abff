package badger_test

import (
	"context"
	"testing"
	"time"
)

// A resend received inside the dedupe window is a replay even when its
// write runs after the window ended (queued behind a batch and its sync:
// ~100 ms here). The window is decided on the request's clock; Badger,
// which hides a record with a TTL by the wall clock when the writer reads
// it, used to drop the record first, and the resend became a second event
// with another gateway id in its 202.
func TestResendReceivedInsideTheWindowIsReplayedWhenProcessedLate(t *testing.T) {
	t.Parallel()
	db := edgeOpen(t)
	ctx, now := context.Background(), time.Now().UTC()
	sec := now.Truncate(time.Second).Add(2 * time.Second)
	until := sec.Add(900 * time.Millisecond) // Badger drops the record at sec+1s
	first := edgeEvent("late", now, until, "ep")
	if _, err := db.Ingest(ctx, first); err != nil {
		t.Fatal(err)
	}
	// Received 1 ms before the window ends ...
	receivedAt := until.Add(-time.Millisecond)
	again := edgeEvent("late", receivedAt, receivedAt.Add(time.Hour), "ep")
	// ... and written 101 ms later.
	waitUntil(t, sec.Add(time.Second))
	res, err := db.Ingest(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replayed {
		t.Fatalf("a resend received at %s, inside the dedupe window (until %s), was accepted as a second event %s (the first is %s)",
			receivedAt.Format(time.StampMilli), until.Format(time.StampMilli), again.Event.ID, first.Event.ID)
	}
}
