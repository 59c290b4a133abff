package badger

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"hookgate/storage"
)

// A page cut short by the scan budget ends at a record the caller may not
// see. Its cursor must not show that record's ID, must still work after a
// restart (bulk replays store theirs), and cursors of earlier builds (the
// plain base64url of an ID) must still be read.
func TestCursorsAreSealedAndOutliveARestart(t *testing.T) {
	defer func(b int) { listScanBudget = b }(listScanBudget)
	listScanBudget = 2
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Add(-time.Minute)
	var foreign []string
	var mine string
	for i := range 4 {
		tenant := "other" // the three newest
		if i == 0 {
			tenant = "me"
		}
		req := acceptRequest(fmt.Sprintf("evt-%d", i), `{}`, start.Add(time.Duration(i)*time.Millisecond), "ep-"+tenant)
		req.Key.Tenant, req.Event.Tenant, req.Deliveries[0].Tenant = tenant, tenant, tenant
		if _, err := db.Accept(ctx, req); err != nil {
			t.Fatal(err)
		}
		if tenant == "me" {
			mine = req.Deliveries[0].ID
		} else {
			foreign = append(foreign, req.Deliveries[0].ID)
		}
	}
	ds, next, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "me"})
	if err != nil || len(ds) != 0 || next == "" {
		t.Fatalf("first page: %d, cursor %q, %v; want none and a cursor", len(ds), next, err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(next)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range append(foreign, mine) {
		if bytes.Contains(raw, []byte(id)) {
			t.Fatalf("cursor shows delivery %s", id)
		}
	}
	if bytes.Contains(raw, []byte("dlv_")) {
		t.Fatalf("cursor shows an ID: %q", raw)
	}

	// After a restart the cursor goes on where it stopped.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got []string
	for cursor := next; cursor != ""; {
		ds, cursor, err = db.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "me", Cursor: cursor})
		if err != nil || len(got) > 4 {
			t.Fatalf("paging after a restart: %v", err)
		}
		for _, d := range ds {
			got = append(got, d.ID)
		}
	}
	if len(got) != 1 || got[0] != mine {
		t.Fatalf("pages after a restart: %v, want only %s", got, mine)
	}

	// A plain cursor of an earlier build: after the newest foreign one.
	plain := base64.RawURLEncoding.EncodeToString([]byte(foreign[len(foreign)-1]))
	ds, _, err = db.ListDeliveries(ctx, storage.DeliveryFilter{Cursor: plain, Limit: 10})
	if err != nil || len(ds) != 2 || ds[0].ID != foreign[1] {
		t.Fatalf("plain cursor: %d deliveries, %v", len(ds), err)
	}

	// A sealed cursor changed in transit is refused.
	bad := []byte(raw)
	bad[len(bad)-1] ^= 1
	_, _, err = db.ListDeliveries(ctx, storage.DeliveryFilter{Cursor: base64.RawURLEncoding.EncodeToString(bad)})
	if !errors.Is(err, storage.ErrBadCursor) {
		t.Fatalf("tampered cursor: %v, want ErrBadCursor", err)
	}
}
