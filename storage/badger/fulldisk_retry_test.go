package badger

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"hookgate/internal/tmpfs"
)

// A provider's retry of an event the gateway acknowledged needs no write:
// SPEC section 3 answers it with the stored status and body. On a nearly
// full disk (writes refused with ErrNoSpace, the gateway's 503) such a
// retry must still get the stored answer. It does only while the
// process's table of recent keys remembers the key: after a restart (or
// once later keys evicted it) the retry goes to the writer, which refuses
// the whole batch for space before reading the dedupe record, and the
// provider is told 503 for an event that is stored, durable and delivered.
func TestRetryOfAStoredEventIsAnsweredOnANearlyFullDisk(t *testing.T) {
	dir := tmpfs.Mount(t, "160m")
	o := Options{MemTableSize: 4 << 20}
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().UTC()
	first := acceptRequest("evt_stored", `{"id":"evt_stored"}`, now, "ep")
	first.Response.Body = []byte(`{"id":"` + first.Event.ID + `","event_id":"evt_stored"}`)
	if _, err := db.Accept(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, o) // a restart: the table of recent keys is empty
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })

	// Fill the disk to just above what control writes need: data writes
	// (new events) are refused from now on.
	free, _ := freeSpace(dir)
	keep := openNeed(o.MemTableSize) + 2<<20
	if free-keep <= 0 || keep >= db.reserve() {
		t.Fatalf("setup: %d bytes free, keep %d, reserve %d", free, keep, db.reserve())
	}
	tmpfs.Fill(t, filepath.Join(dir, "filler"), keep)
	if _, err := db.Accept(ctx, acceptRequest("evt_new", `{"id":"evt_new"}`, time.Now().UTC(), "ep")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("setup: a new event on the nearly full disk: %v, want ErrNoSpace", err)
	}

	retry := acceptRequest("evt_stored", `{"id":"evt_stored"}`, time.Now().UTC(), "ep")
	res, err := db.Accept(ctx, retry)
	if err != nil {
		t.Fatalf("the provider's retry of a stored event: %v; want the stored answer (nothing needs writing)", err)
	}
	if !res.Replayed || res.Response.Status != 202 || string(res.Response.Body) != string(first.Response.Body) {
		t.Fatalf("retry answered %+v (%s), want the stored %s", res, res.Response.Body, first.Response.Body)
	}
}
