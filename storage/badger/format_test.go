package badger

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// Format checks: data directories in each older on-disk format, written
// by the real older binaries, opened by this one (README: "A data directory written by an earlier build opens as
// it is").
//
// testdata/store-json-records was written by the binary of commit 4819047
// (the last build before binary records, 910bfb8: hot-path records are JSON): the
// config had source cfgsrc (tenant acme, scheme none, event_id json:/id,
// event_type json:/type, dedupe.ttl 876000h so the fixture does not expire)
// and endpoint cfgep (a receiver answering 500, retry initial_interval 1h);
// three events {"id":"e0".."e2","type":"t.x"} were ingested (202), each
// delivery had one failed attempt, then the binary was stopped with
// SIGTERM. DISCARD, which Badger makes again, is left out.
//
// testdata/store-legacy-event-keys was written by the binary of commit 9b4700e
// (binary records, event records under the old ev: keys, no tenant
// index of deliveries) on the same config: events e0..e2 ingested, then,
// under Idempotency-Key k-ep (operator token), POST /api/v1/endpoints of
// endpoint apiep (body apiepBody) and a rotate-secret with grace 876000h;
// stopped with SIGTERM.

// openFixture copies a data directory from testdata into a temporary one
// (Badger writes to what it opens) and opens it.
func openFixture(t *testing.T, name string) *DB {
	t.Helper()
	src := filepath.Join("testdata", name)
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("open a store written by build %s: %v", name, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestJSONRecordStoreKeepsEventsDeliveriesAndDedupe: every event,
// delivery and dedupe record that build acknowledged is still there, and a
// provider's resend is answered as the first time.
func TestJSONRecordStoreKeepsEventsDeliveriesAndDedupe(t *testing.T) {
	db := openFixture(t, "store-json-records")
	ctx := context.Background()

	evs, _, err := db.ListEvents(ctx, storage.EventFilter{Limit: 100})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	if len(evs) != 3 {
		t.Errorf("GET /events lists %d of the 3 acknowledged events", len(evs))
	}

	// The provider resends e0 with the same body: the stored 202, not a
	// 503 and not a second event.
	res, err := db.Ingest(ctx, fixtureIngest("e0", `{"id":"e0","type":"t.x"}`))
	switch {
	case err != nil:
		t.Errorf("resend of an acknowledged event: %v (ingest answers 503)", err)
	case !res.Replayed:
		t.Errorf("resend of an acknowledged event stored a second event")
	case string(res.Response.Body) != `{"id":"evt_06h303qf17tm1c1ev5fysvfz2g","event_id":"e0"}`:
		t.Errorf("resend answered %s, not the first answer", res.Response.Body)
	}

	ds, _, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Endpoint: "cfgep", Limit: 100})
	if err != nil {
		t.Fatalf("list deliveries: %v", err)
	}
	if len(ds) != 3 {
		t.Errorf("GET /deliveries lists %d of the 3 pending deliveries", len(ds))
	}
	// Due after their 1h backoff: each is claimed with its event, to be sent.
	jobs, err := db.Claim(ctx, "cfgep", time.Now().Add(2*time.Hour), 10, time.Minute)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	sendable := 0
	for _, j := range jobs {
		if len(j.Event.Body) > 0 {
			sendable++
		}
	}
	if sendable != 3 {
		t.Errorf("%d of the 3 pending deliveries can be sent after the upgrade (claimed %d)", sendable, len(jobs))
	}
}

// apiepBody is the body of the fixture's idempotent POST /api/v1/endpoints.
const apiepBody = `{"id":"apiep","tenant":"acme","url":"http://127.0.0.1:18090/api","secret":"whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}`

// adminRequestHash is the admin API's request hash (gateway.requestHash):
// SHA-256 over method, path and body, each after its length.
func adminRequestHash(method, path, body string) [32]byte {
	h := sha256.New()
	for _, part := range []string{method, path, body} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(part))))
		h.Write([]byte(part))
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// TestLegacyEventKeyStoreKeepsEverything passes: kept as a check of a
// real older store (not one made to look older), which nothing else
// opens: legacy event keys are listed and dedupe, the tenant index is
// built, an answered admin Idempotency-Key still answers, and a rotated
// endpoint secret keeps its grace.
func TestLegacyEventKeyStoreKeepsEverything(t *testing.T) {
	db := openFixture(t, "store-legacy-event-keys")
	ctx := context.Background()
	now := time.Now().UTC()

	evs, _, err := db.ListEvents(ctx, storage.EventFilter{Tenant: "acme", Limit: 100})
	if err != nil || len(evs) != 3 {
		t.Fatalf("acme's events: %d, %v; want 3", len(evs), err)
	}
	res, err := db.Ingest(ctx, fixtureIngest("e1", `{"id":"e1","type":"t.x"}`))
	if err != nil || !res.Replayed || string(res.Response.Body) != `{"id":"evt_06h303x2gxp8822etqfrm869hm","event_id":"e1"}` {
		t.Errorf("resend of e1: %+v, %v; want the stored answer", res, err)
	}
	if _, err := db.Ingest(ctx, fixtureIngest("e1", `{"id":"e1","type":"t.changed"}`)); !errors.Is(err, storage.ErrIdempotencyMismatch) {
		t.Errorf("e1 with another body: %v; want ErrIdempotencyMismatch (422)", err)
	}

	testsupport.WaitFor(t, 10*time.Second, "the tenant index", db.tenantIndexReady.Load)
	ds, _, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "acme", Limit: 100})
	if err != nil || len(ds) != 3 {
		t.Errorf("acme's deliveries: %d, %v; want 3", len(ds), err)
	}

	ir, err := db.ClaimKey(ctx, storage.IdemClaim{
		Key: "k-ep", RequestHash: adminRequestHash("POST", "/api/v1/endpoints", apiepBody),
		Now: now, LeaseUntil: now.Add(30 * time.Second), Remember: now.Add(72 * time.Hour),
	})
	if err != nil || ir.State != storage.IdemReplay || ir.Response.Status != 201 {
		t.Errorf("the answered Idempotency-Key k-ep: %+v, %v; want its stored 201", ir, err)
	}

	ep, err := db.GetEndpoint(ctx, "apiep")
	if err != nil {
		t.Fatal(err)
	}
	if len(ep.Secrets) != 2 || ep.Secrets[1].Value != "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" || !ep.Secrets[1].ExpiresAt.After(now) {
		t.Errorf("apiep's secrets after the upgrade: %+v; want the new one and the old one within its grace", ep.Secrets)
	}
}

// fixtureIngest is the store's part of an ingest of body as event id of
// the fixtures' source (acme/cfgsrc), received now.
func fixtureIngest(id, body string) *storage.IngestRequest {
	now := time.Now().UTC()
	ev := storage.Event{ID: storage.NewID("evt_", now), Tenant: "acme", Source: "cfgsrc", EventID: id, Type: "t.x",
		ReceivedAt: now, ContentType: "application/json", Headers: map[string]string{}, Body: []byte(body),
		IdempotencyKey: storage.IdempotencyKey("acme", "cfgsrc", id)}
	return &storage.IngestRequest{
		Key: storage.DedupeKey{Tenant: "acme", Source: "cfgsrc", EventID: id}, BodyHash: sha256.Sum256([]byte(body)),
		DedupeUntil: now.Add(72 * time.Hour), Event: ev,
		Response: storage.Response{Status: 202, Body: []byte(fmt.Sprintf(`{"id":%q,"event_id":%q}`, ev.ID, id))},
	}
}
