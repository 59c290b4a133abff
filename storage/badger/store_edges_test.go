package badger_test

// Bugs of the Badger engine found in review, each fixed,
// each test failing on the code before its fix.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
	"hookgate/storage/badger"
)

func edgeOpen(t *testing.T) *badger.DB {
	t.Helper()
	db, err := badger.Open(t.TempDir(), badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// edgeEvent is an accept request for (t, s, id) with one pending
// delivery, due at now, per endpoint in eps.
func edgeEvent(id string, now, dedupeUntil time.Time, eps ...string) *storage.IngestRequest {
	body := []byte(`{"id":"` + id + `"}`)
	evt := storage.NewID("evt_", now)
	req := &storage.IngestRequest{
		Key:         storage.DedupeKey{Tenant: "t", Source: "s", EventID: id},
		BodyHash:    sha256.Sum256(body),
		DedupeUntil: dedupeUntil,
		Event: storage.Event{ID: evt, Tenant: "t", Source: "s", EventID: id, ReceivedAt: now,
			Body: body, ContentType: "application/json", IdempotencyKey: storage.IdempotencyKey("t", "s", id)},
		Response: storage.Response{Status: 202, Body: []byte(`{"id":"` + evt + `"}`)},
	}
	for _, ep := range eps {
		req.Deliveries = append(req.Deliveries, storage.Delivery{
			ID: storage.NewID("dlv_", now), Event: evt, Tenant: "t", Endpoint: ep,
			IdempotencyKey: req.Event.IdempotencyKey, State: storage.StatePending,
			CreatedAt: now, NextAttemptAt: now, RetryFrom: now, UpdatedAt: now,
		})
	}
	return req
}

// waitUntil polls the wall clock until it passes t (bounded by a deadline).
func waitUntil(t *testing.T, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(at) {
		if time.Now().After(deadline) {
			t.Fatal("clock did not advance")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Was a bug (outbox.go, Claim): every error of the claim's write is dropped,
// `if err != nil || len(claimed) == 0 { return nil, nil }`. A closed store,
// a full disk (ErrNoSpace) or a failed sync look like "nothing is due": the
// dispatcher logs nothing and, with NextDue still reporting due work,
// re-claims every millisecond (outbound minIdleWait) instead of backing off.
func TestClaimReportsStoreErrors(t *testing.T) {
	db, err := badger.Open(t.TempDir(), badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, now := context.Background(), time.Now().UTC()
	if _, err := db.Ingest(ctx, edgeEvent("a", now, now.Add(time.Hour), "ep")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	jobs, err := db.Claim(ctx, "ep", now, 10, time.Minute)
	if !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Claim on a closed store = (%d jobs, %v), want storage.ErrClosed "+
			"(storage.ErrClosed: \"returned by every method once the store is closed\")", len(jobs), err)
	}
}

// Was a bug (purge.go, Purge): the purge of up to limit events is one
// transaction with no bound on its key count. Badger refuses a transaction
// of more than maxBatchCount keys (52,428 with the default 32 MiB
// memtable), and a single-op batch is not split: Purge then fails with
// ErrTxnTooBig on every call, always on the same oldest events, and
// retention stops for good (the gateway logs "retention sweep failed"
// each minute while the disk fills).
//
// The gateway purges 256 events per call (gateway/background.go), so 205
// keys per event are enough. With the default retry policy (30 attempts in
// 24h) an event whose delivery failed for a day has 2 + 3 + 30 = 35 keys
// per delivery: 7 endpoints down for a day is enough. To keep the test
// cheap, the events here carry pending deliveries (4 keys each) instead of
// attempt records; the count is what matters.
func TestPurgeOfHeavyEventsSucceeds(t *testing.T) {
	db := edgeOpen(t)
	ctx := context.Background()
	old := time.Now().UTC().Add(-48 * time.Hour)
	const events, perEvent = 256, 51 // 256 * (2 + 4*51) = 52,736 keys
	eps := make([]string, perEvent)
	for i := range eps {
		eps[i] = fmt.Sprint("ep", i%7) // 7 endpoints, several deliveries each (replays)
	}
	var wg sync.WaitGroup
	errs := make(chan error, events)
	for i := range events {
		wg.Go(func() {
			if _, err := db.Ingest(ctx, edgeEvent(fmt.Sprint("heavy-", i), old, old.Add(time.Hour), eps...)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for calls := 0; ; calls++ {
		n, err := db.Purge(ctx, time.Now().Add(-24*time.Hour), time.Now().Add(-24*time.Hour), 256)
		if err != nil || (n == 0 && total < events) {
			t.Fatalf("Purge(limit 256) = %d, %v after %d events: retention stopped", n, err, total)
		}
		if n == 0 {
			break
		}
		if calls > events {
			t.Fatal("Purge does not finish")
		}
		total += n
	}
	if total != events {
		t.Fatalf("purged %d events, want %d", total, events)
	}
	evs, _, err := db.ListEvents(ctx, storage.EventFilter{Limit: 10})
	if err != nil || len(evs) != 0 {
		t.Fatalf("after the purge: %d events left, %v", len(evs), err)
	}
}

// Was a bug (ingest.go, Ingest): the dedupe record's Badger TTL is
// time.Until(DedupeUntil), and Badger keeps expiry in whole Unix seconds
// (Entry.WithTTL truncates). The record vanishes up to a second before
// DedupeUntil, so a resend received inside the dedupe window (which
// checkDedupe would answer as a replay) is accepted as a second event.
func TestDedupeRecordLastsItsWindow(t *testing.T) {
	t.Parallel()
	db := edgeOpen(t)
	ctx, now := context.Background(), time.Now().UTC()
	sec := now.Truncate(time.Second).Add(2 * time.Second)
	until := sec.Add(900 * time.Millisecond) // the window ends 0.9s after a whole second
	first := edgeEvent("edge", now, until, "ep")
	if _, err := db.Ingest(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, sec.Add(200*time.Millisecond))
	at := time.Now().UTC()
	if !at.Before(until) {
		t.Skip("too slow to land inside the window")
	}
	again := edgeEvent("edge", at, at.Add(time.Hour), "ep") // the same event, resent
	res, err := db.Ingest(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replayed {
		t.Fatalf("a resend received at %s, before the dedupe window's end %s, was accepted as a new event (%s); "+
			"the first was %s", at.Format(time.StampMilli), until.Format(time.StampMilli), again.Event.ID, first.Event.ID)
	}
}

// Was a bug (idempotency.go, FinishKey): same truncation for admin
// Idempotency-Keys: the stored answer vanishes up to a second before its
// expiry, and a retry inside the window executes the POST again.
func TestIdempotencyAnswerLastsItsWindow(t *testing.T) {
	t.Parallel()
	db := edgeOpen(t)
	ctx, now := context.Background(), time.Now().UTC()
	hash := sha256.Sum256([]byte("POST /api/v1/endpoints {}"))
	res, err := db.ClaimKey(ctx, storage.IdemClaim{Tenant: "t", Key: "k", RequestHash: hash, Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || res.State != storage.IdemNew {
		t.Fatalf("claim: %+v %v", res, err)
	}
	sec := now.Truncate(time.Second).Add(2 * time.Second)
	expires := sec.Add(900 * time.Millisecond)
	if err := db.FinishKey(ctx, "t", "k", res.LeaseUntil, storage.Response{Status: 201, Body: []byte(`{}`)}, expires); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, sec.Add(200*time.Millisecond))
	at := time.Now().UTC()
	if !at.Before(expires) {
		t.Skip("too slow to land inside the window")
	}
	res, err = db.ClaimKey(ctx, storage.IdemClaim{Tenant: "t", Key: "k", RequestHash: hash, Now: at, LeaseUntil: at.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != storage.IdemReplay {
		t.Fatalf("a retry at %s, before the answer's expiry %s, got state %d, want IdemReplay (%d): the request runs twice",
			at.Format(time.StampMilli), expires.Format(time.StampMilli), res.State, storage.IdemReplay)
	}
}

// Was a bug (outbox.go, Claim): dueNanos puts a due time before 1970 (the zero
// time) at outbox position 0 "so they are never starved", but Claim then
// compares the record's due time with the position parsed back from the
// key (time.Unix(0, 0)), finds them different, and deletes the entry as
// stale. The delivery stays pending with no outbox entry: never claimed,
// not counted by Depth or NextDue, until someone retries it by hand.
func TestZeroDueDeliveryStaysInTheOutbox(t *testing.T) {
	db := edgeOpen(t)
	ctx, now := context.Background(), time.Now().UTC()
	req := edgeEvent("z", now, now.Add(time.Hour)) // no delivery at accept
	if _, err := db.Ingest(ctx, req); err != nil {
		t.Fatal(err)
	}
	d := storage.Delivery{ID: storage.NewID("dlv_", now), Event: req.Event.ID, Tenant: "t", Endpoint: "ep",
		State: storage.StatePending, CreatedAt: now, RetryFrom: now, UpdatedAt: now} // NextAttemptAt: zero = due at once
	if err := db.Enqueue(ctx, []storage.Delivery{d}); err != nil {
		t.Fatal(err)
	}
	claimed := 0
	for range 3 {
		jobs, err := db.Claim(ctx, "ep", now, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		claimed += len(jobs)
	}
	got, err := db.GetDelivery(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	live, _, _ := db.Depth(ctx, "ep", now, 100)
	if claimed != 1 {
		t.Fatalf("delivery due at the zero time claimed %d times (state %s, outbox live %d): it left the outbox undelivered",
			claimed, got.State, live)
	}
}

// Was a bug (recover.go): Open released claims of a dead process only if
// their lease ended within 10 minutes, but an endpoint with a longer
// timeout gets a longer lease: its claims waited out the lease after a
// restart instead of being due at once.
func TestOpenReleasesLongLeases(t *testing.T) {
	dir := t.TempDir()
	db, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, now := context.Background(), time.Now().UTC()
	if err := db.PutEndpoint(ctx, &storage.Endpoint{ID: "slow", Timeout: 20 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest(ctx, edgeEvent("long-1", now, now.Add(time.Hour), "slow")); err != nil {
		t.Fatal(err)
	}
	claimed, err := db.Claim(ctx, "slow", now, 1, 20*time.Minute+30*time.Second)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %d", err, len(claimed))
	}
	db = reopen(t, db)
	defer db.Close()
	jobs, err := db.Claim(ctx, "slow", time.Now(), 1, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("after reopen %d deliveries due now (%v), want the one a dead process held", len(jobs), err)
	}
}
