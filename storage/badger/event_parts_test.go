package badger

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"hookgate/storage"
	"os"
	"path/filepath"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
)

// An event record over MaxInlineRecord but within maxPartedRecord (an
// incompressible body of the default max_body, 1MiB, with its headers) is
// kept in the LSM tree in parts: it reads back whole through every path
// (GetEvent, ListEvents, Claim), also after a restart, retention deletes
// every part, and Badger's value log, whose space is never reclaimed,
// stays empty. A record past maxPartedRecord (max_body raised) still goes
// to the value log whole, and reads back too.
func TestEventRecordsInParts(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	then := time.Now().UTC().Add(-2 * time.Hour)
	type stored struct {
		id   string
		body []byte
	}
	var evs []stored
	for i, size := range []int{512 << 10, 1 << 20, maxPartedRecord + 1} {
		body := make([]byte, size)
		if _, err := rand.Read(body); err != nil { // incompressible
			t.Fatal(err)
		}
		req := acceptRequest("big-"+string(rune('a'+i)), "", then.Add(time.Duration(i)*time.Millisecond), "ep")
		req.Event.Body, req.BodyHash = body, sha256.Sum256(body)
		req.Event.Headers = map[string]string{"X-Pad": string(bytes.Repeat([]byte("h"), 8<<10))}
		if _, err := db.Ingest(ctx, req); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, stored{req.Event.ID, body})
	}
	if n := countKeys(t, db, prefixEventPart); n != 2 {
		t.Errorf("%d event parts stored, want 2 (one record of 1MiB and more, in two parts)", n)
	}
	check := func(when string) {
		t.Helper()
		for _, e := range evs {
			ev, err := db.GetEvent(ctx, e.id)
			if err != nil || !bytes.Equal(ev.Body, e.body) {
				t.Fatalf("%s: GetEvent %s: %v, body equal %v", when, e.id, err, bytes.Equal(ev.Body, e.body))
			}
		}
		page, _, err := db.ListEvents(ctx, storage.EventFilter{Limit: 10})
		if err != nil || len(page) != len(evs) {
			t.Fatalf("%s: ListEvents: %d events, %v", when, len(page), err)
		}
		jobs, err := db.Claim(ctx, "ep", time.Now(), 10, time.Minute)
		if err != nil || len(jobs) != len(evs) {
			t.Fatalf("%s: Claim: %d jobs, %v", when, len(jobs), err)
		}
		for _, j := range jobs {
			if len(j.Event.Body) < 512<<10 {
				t.Fatalf("%s: claimed %s with a body of %d bytes", when, j.Event.ID, len(j.Event.Body))
			}
		}
		for _, g := range storage.LeaseGroups(deliveriesOf(jobs)) {
			if err := db.Release(ctx, g.IDs, g.Lease, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("written")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	check("after a restart")

	if n, err := db.Purge(ctx, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour), 100); err != nil || n != len(evs) {
		t.Fatalf("purge: %d, %v", n, err)
	}
	if n := countKeys(t, db, prefixEventPart); n != 0 {
		t.Errorf("%d event parts left after retention", n)
	}
	if err := db.Close(); err != nil { // Badger truncates its value log to what it holds
		t.Fatal(err)
	}
	vlog := int64(0)
	files, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			vlog += fi.Size()
		}
	}
	if vlog < maxPartedRecord || vlog > maxPartedRecord+1<<20 {
		t.Errorf("the value log holds %d bytes: want only the record past maxPartedRecord", vlog)
	}
}

func deliveriesOf(jobs []storage.Job) []storage.Delivery {
	ds := make([]storage.Delivery, len(jobs))
	for i, j := range jobs {
		ds[i] = j.Delivery
	}
	return ds
}

// An event record in parts whose last part is lost (a damaged store) is
// one unreadable event, not a stuck store: listings skip it and go on to
// the others, its delivery fails with an attempt saying why (the
// endpoint's other deliveries go), and retention deletes it with every
// part still there.
func TestPartedEventWithALostPartIsSkippedFailedAndPurged(t *testing.T) {
	db := openTestDB(t, Options{})
	ctx := context.Background()
	then := time.Now().UTC().Add(-2 * time.Hour)
	var ids []string
	for i, size := range []int{1 << 20, 1<<20 + 4096, 1 << 10} {
		body := make([]byte, size)
		if _, err := rand.Read(body); err != nil {
			t.Fatal(err)
		}
		req := acceptRequest(string(rune('a'+i)), "", then.Add(time.Duration(i)*time.Millisecond), "ep")
		req.Event.Body, req.BodyHash = body, sha256.Sum256(body)
		if _, err := db.Ingest(ctx, req); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, req.Event.ID)
	}
	if n := countKeys(t, db, prefixEventPart); n != 4 {
		t.Fatalf("%d parts, want 4", n)
	}
	damaged := ids[0]
	if err := db.update(ctx, 64, func(txn *bdg.Txn) error { return txn.Delete(eventPartKey(damaged, 1)) }); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetEvent(ctx, damaged); !errors.Is(err, errCodec) {
		t.Fatalf("GetEvent of the damaged event: %v, want a malformed record", err)
	}
	page, _, err := db.ListEvents(ctx, storage.EventFilter{Limit: 10})
	if err != nil || len(page) != 2 {
		t.Fatalf("ListEvents: %d events, %v; want the 2 readable ones", len(page), err)
	}
	page, _, err = db.ListEvents(ctx, storage.EventFilter{Tenant: "acme", Limit: 10})
	if err != nil || len(page) != 2 {
		t.Fatalf("tenant ListEvents: %d events, %v; want the 2 readable ones", len(page), err)
	}
	jobs, err := db.Claim(ctx, "ep", time.Now(), 10, time.Minute)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("Claim: %d jobs, %v; want the 2 readable ones", len(jobs), err)
	}
	ds, _, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Event: damaged})
	if err != nil || len(ds) != 1 || ds[0].State != storage.StateFailed {
		t.Fatalf("the damaged event's delivery: %+v, %v; want failed", ds, err)
	}
	for _, g := range storage.LeaseGroups(deliveriesOf(jobs)) {
		if err := db.Release(ctx, g.IDs, g.Lease, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := db.Purge(ctx, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour), 100); err != nil || n != 3 {
		t.Fatalf("Purge: %d, %v; want all 3 events", n, err)
	}
	for _, p := range [][]byte{prefixEventPart, prefixEvent, prefixTenantEvent, prefixDelivery} {
		if n := countKeys(t, db, p); n != 0 {
			t.Errorf("%d %s keys left after retention", n, p)
		}
	}
}
