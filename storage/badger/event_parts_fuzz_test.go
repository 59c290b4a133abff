package badger

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// FuzzDamagedPartedEvent: whatever bytes an event's key and its part keys
// hold (a damaged store: a torn part count, a lost or extra part, parts
// that do not join into a record), GetEvent does not panic and answers
// what the layout of putEvent says: a value that does not begin with
// codecParts is the record itself; one that does names 1 or 2 parts
// (anything else is malformed), each of which must be there, and their
// bytes joined in order are the record.
func FuzzDamagedPartedEvent(f *testing.F) {
	ev := storage.Event{ID: "evt_x", Tenant: "acme", Source: "s", EventID: "e", Type: "t",
		ReceivedAt: time.Unix(1_700_000_000, 5).UTC(), ContentType: "application/json",
		Headers: map[string]string{"A": "b"}, Body: bytes.Repeat([]byte(`{"k":"v"}`), 40)}
	rec := encodeEvent(&ev)
	half := len(rec) / 2
	f.Add([]byte{codecParts, 2}, rec[:half], rec[half:], []byte(nil), uint8(3))
	f.Add([]byte{codecParts, 1}, rec, []byte("x"), []byte(nil), uint8(3))
	f.Add([]byte{codecParts, 2}, rec[:half], rec[half:], []byte(nil), uint8(1))
	f.Add([]byte{codecParts, 0x82, 0x00}, rec[:half], rec[half:], rec, uint8(7))
	f.Add([]byte{codecParts}, rec, rec, rec, uint8(7))
	f.Add([]byte{codecParts, 3}, rec, rec, rec, uint8(7))
	f.Add([]byte{codecParts, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, rec, []byte(nil), []byte(nil), uint8(1))
	f.Add(rec, []byte(nil), []byte(nil), []byte(nil), uint8(0))
	f.Add([]byte(`{"id":"evt_x"}`), []byte(nil), []byte(nil), []byte(nil), uint8(0))
	f.Add([]byte{codecParts, 1}, []byte{codecParts, 1}, []byte(nil), []byte(nil), uint8(1))
	f.Add([]byte{}, []byte(nil), []byte(nil), []byte(nil), uint8(0))

	db, err := Open(f.TempDir(), Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = db.Close() })
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, head, p0, p1, p2 []byte, present uint8) {
		id := fmt.Sprintf("evt_fz%d", seq.Add(1))
		parts := [][]byte{p0, p1, p2}
		if err := db.update(context.Background(), len(head)+len(p0)+len(p1)+len(p2)+256, func(txn *bdg.Txn) error {
			for i, p := range parts {
				if present&(1<<i) != 0 {
					if err := txn.Set(eventPartKey(id, i), p); err != nil {
						return err
					}
				}
			}
			return txn.Set(eventKey(id), head)
		}); err != nil {
			t.Skip(err) // too big for one transaction
		}
		got, gotErr := db.GetEvent(context.Background(), id)

		// The reference reading.
		var want storage.Event
		var wantErr error
		record, malformed := head, false
		if len(head) > 0 && head[0] == codecParts {
			n, k := uint64(0), 0
			for shift, i := uint(0), 1; i < len(head); i, shift = i+1, shift+7 {
				if shift > 63 {
					break
				}
				n |= uint64(head[i]&0x7f) << shift
				if head[i] < 0x80 {
					k = i
					break
				}
			}
			record = nil
			switch {
			case k == 0 || n < 1 || n > 2:
				malformed = true
			default:
				for i := range int(n) {
					if present&(1<<i) == 0 {
						malformed = true
						break
					}
					record = append(record, parts[i]...)
				}
			}
		}
		if malformed {
			wantErr = errCodec
		} else {
			wantErr = decode(record, &want)
		}
		switch {
		case malformed && !errors.Is(gotErr, errCodec):
			t.Fatalf("head %x, parts present %03b: GetEvent = %v, want a malformed record", head, present&7, gotErr)
		case (gotErr == nil) != (wantErr == nil):
			t.Fatalf("head %x, parts present %03b: GetEvent err %v, the reference reading %v", head, present&7, gotErr, wantErr)
		case gotErr == nil && !sameEvent(got, want):
			t.Fatalf("head %x, parts present %03b: GetEvent = %+v, the reference reading %+v", head, present&7, got, want)
		}
	})
}

// TestPurgeOfPartedEventWithDamagedHeadDeletesItsParts: retention deletes
// an unreadable event record (RELIABILITY section 6), and a parted one
// with a lost part with every part still there; but when the damage is to
// the event's own key (the record that names the parts), the purge reads
// no part count and deletes the key alone: the parts (about 2 MiB of an
// event at the default max_body) stay in the store for good, which is
// what writing records in parts was for (reclaiming their space).
func TestPurgeOfPartedEventWithDamagedHeadDeletesItsParts(t *testing.T) {
	db := openTestDB(t, Options{})
	ctx := context.Background()
	then := time.Now().UTC().Add(-2 * time.Hour)
	body := make([]byte, 1<<20)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	req := acceptRequest("damaged-head", "", then, "ep")
	req.Event.Body, req.BodyHash = body, sha256.Sum256(body)
	if _, err := db.Ingest(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, db, prefixEventPart); n != 2 {
		t.Fatalf("%d parts, want 2", n)
	}
	damage(t, db, eventKey(req.Event.ID))
	if _, err := db.GetEvent(ctx, req.Event.ID); err == nil {
		t.Fatal("the damaged record reads")
	}
	// Its delivery finished, so retention takes the event.
	ds, _, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Event: req.Event.ID})
	if err != nil || len(ds) != 1 {
		t.Fatalf("deliveries: %v, %v", ds, err)
	}
	jobs, err := db.Claim(ctx, "ep", time.Now(), 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range storage.LeaseGroups(deliveriesOf(jobs)) {
		if err := db.Release(ctx, g.IDs, g.Lease, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := db.Purge(ctx, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour), 100); err != nil || n != 1 {
		t.Fatalf("Purge: %d, %v; want the event", n, err)
	}
	if n := countKeys(t, db, prefixEvent); n != 0 {
		t.Fatalf("%d event keys left", n)
	}
	if n := countKeys(t, db, prefixEventPart); n != 0 {
		t.Errorf("%d parts of the purged event left in the store for good", n)
	}
}
