package badger_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"hookgate/storage"
	"hookgate/storage/badger"
	"hookgate/storage/storagetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storagetest.Run(t, storagetest.Opener{
		Open: func(t *testing.T) storage.Store {
			db, err := badger.Open(t.TempDir(), badger.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return db
		},
		Reopen: func(t *testing.T, s storage.Store) storage.Store { return reopen(t, s.(*badger.DB)) },
	})
}

// reopen closes db and opens its directory again, as a restart does.
func reopen(t *testing.T, db *badger.DB) *badger.DB {
	t.Helper()
	dir := db.Dir()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestOpenReleasesStaleClaims: claims found when the store opens were made
// by a process that is gone (Badger locks its directory): they are due at
// once, without waiting for their lease and without an attempt counted.
func TestOpenReleasesStaleClaims(t *testing.T) {
	dir := t.TempDir()
	db, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, now := context.Background(), time.Now().UTC()
	if err := db.PutEndpoint(ctx, &storage.Endpoint{ID: "ep"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := db.Ingest(ctx, benchAccept(int64(i), now)); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := db.Claim(ctx, "ep", now, 2, time.Minute) // the "dead" process's claims
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim: %v %d", err, len(claimed))
	}
	db = reopen(t, db)
	defer db.Close()
	jobs, err := db.Claim(ctx, "ep", time.Now(), 10, time.Minute)
	if err != nil || len(jobs) != 3 {
		t.Fatalf("after reopen %d deliveries due now (%v), want all 3", len(jobs), err)
	}
	for _, j := range jobs {
		if j.Delivery.AttemptCount != 0 {
			t.Fatalf("a released claim counted an attempt: %+v", j.Delivery)
		}
	}
}

// TestOpenAfterKillDuringMemtableCreation: a process killed between
// creating a memtable log and sizing it leaves an empty *.mem file; the
// store still opens, with everything written before.
func TestOpenAfterKillDuringMemtableCreation(t *testing.T) {
	testOpenAfterKillDuringLogCreation(t, "00009.mem")
}

// The same for the value log: every open creates the next one
// (NNNNNN.vlog, one past the highest) and then sizes it, so a kill during
// startup can leave it empty; the next start then failed ("Open existing
// file: ...vlog err: Create a new file") and the gateway stayed down.
func TestOpenAfterKillDuringValueLogCreation(t *testing.T) {
	testOpenAfterKillDuringLogCreation(t, "000009.vlog")
}

// testOpenAfterKillDuringLogCreation leaves the empty file name, as a
// kill leaves it, beside a closed store, and opens the store again.
func testOpenAfterKillDuringLogCreation(t *testing.T, name string) {
	dir := t.TempDir()
	db, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, now := context.Background(), time.Now()
	req := benchAccept(1, now)
	if _, err := db.Ingest(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// What the kill leaves: the next log, created but empty.
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	db, err = badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatalf("open after a kill while creating %s: %v", name, err)
	}
	defer db.Close()
	if _, err := db.GetEvent(ctx, req.Event.ID); err != nil {
		t.Fatalf("event written before the kill: %v", err)
	}
}

// SyncStats counts every durable write once, in syncs that group them, and
// its buckets are cumulative and bounded by the count (they become a
// Prometheus histogram).
func TestSyncStats(t *testing.T) {
	db, err := badger.Open(t.TempDir(), badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := db.SyncStats()
	const writes = 64
	errs := make(chan error, writes)
	for range writes {
		go func() { errs <- db.Ping(context.Background()) }()
	}
	for range writes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	after := db.SyncStats()
	if got := after.Writes - before.Writes; got != writes {
		t.Errorf("%d writes counted, want %d", got, writes)
	}
	syncs := after.Syncs - before.Syncs
	if syncs < 1 || syncs > writes {
		t.Errorf("%d syncs for %d writes", syncs, writes)
	}
	if after.Seconds <= before.Seconds {
		t.Errorf("sync time did not grow: %v -> %v", before.Seconds, after.Seconds)
	}
	if len(after.Buckets) != len(storage.SyncBounds) {
		t.Fatalf("%d buckets, want %d", len(after.Buckets), len(storage.SyncBounds))
	}
	for i := 1; i < len(after.Buckets); i++ {
		if after.Buckets[i] < after.Buckets[i-1] {
			t.Errorf("buckets not cumulative: %v", after.Buckets)
		}
	}
	if last := after.Buckets[len(after.Buckets)-1]; last > after.Syncs {
		t.Errorf("bucket count %d over the total %d", last, after.Syncs)
	}
}

// Events up to MaxInlineRecord are kept in the LSM tree, where a purge
// gives their space back, not in Badger's value log, whose space this
// engine never reclaims. (With the old 64 KiB threshold both events below
// went to the value log.)
func TestLargeEventsStayOutOfTheValueLog(t *testing.T) {
	dir := t.TempDir()
	db, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var ids []string
	var bodies [][]byte
	for i, size := range []int{200 << 10, 900 << 10} {
		body := make([]byte, size)
		if _, err := rand.Read(body); err != nil { // incompressible
			t.Fatal(err)
		}
		req := benchAccept(int64(i), now)
		req.Event.Body, req.BodyHash = body, sha256.Sum256(body)
		if _, err := db.Ingest(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		ids, bodies = append(ids, req.Event.ID), append(bodies, body)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	vlogs, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, f := range vlogs {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size()
	}
	if size > 64<<10 {
		t.Errorf("value log files hold %d bytes after storing the events", size)
	}
	db, err = badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i, id := range ids {
		ev, err := db.GetEvent(context.Background(), id)
		if err != nil || !bytes.Equal(ev.Body, bodies[i]) {
			t.Errorf("event %d after reopening: %v, body intact %v", i, err, bytes.Equal(ev.Body, bodies[i]))
		}
	}
}
