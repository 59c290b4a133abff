package badger

import (
	"context"
	"testing"
	"time"

	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// A provider's resend that takes Ingest's
// read-only fast path and finds the dedupe record of an event whose write
// is committed but not yet synced must not be answered until that sync
// is done: the answer says the event is stored, and a crash before the
// sync would lose it. The key is made recent by an earlier event under
// the same id whose window has passed, so the resend is not held back by
// the recent-key table.
func TestFastPathResendWaitsForTheSync(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	old := acceptRequest("k", `{"v":1}`, now.Add(-2*time.Hour), "ep1")
	old.DedupeUntil = now.Add(-time.Hour)
	if _, err := db.Ingest(ctx, old); err != nil {
		t.Fatal(err)
	}
	h := holdSyncs(t, db, false, nil)
	first := acceptRequest("k", `{"v":2}`, now, "ep1")
	firstDone := make(chan error, 1)
	go func() { _, err := db.Ingest(ctx, first); firstDone <- err }()
	testsupport.WaitFor(t, 10*time.Second, "the first send's sync to start", h.entered.Load)
	// Its record is committed (visible) while its sync is held.
	testsupport.WaitFor(t, 10*time.Second, "the first send's write to be visible", func() bool {
		_, err := db.GetEvent(ctx, first.Event.ID)
		return err == nil
	})
	resend := acceptRequest("k", `{"v":2}`, now.Add(time.Second), "ep1")
	type answer struct {
		res storage.IngestResult
		err error
	}
	resendDone := make(chan answer, 1)
	go func() { r, err := db.Ingest(ctx, resend); resendDone <- answer{r, err} }()
	select {
	case a := <-resendDone:
		t.Fatalf("the resend was answered (%+v, %v) before the first send's write was synced", a.res, a.err)
	case err := <-firstDone:
		t.Fatalf("the first send was answered (%v) before its sync", err)
	case <-time.After(300 * time.Millisecond): // an absence check, not synchronisation
	}
	h.release()
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	a := <-resendDone
	if a.err != nil || !a.res.Replayed {
		t.Fatalf("resend after the sync: %+v %v", a.res, a.err)
	}
}
