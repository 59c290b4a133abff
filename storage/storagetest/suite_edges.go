package storagetest

// The edges of the contract: exact windows, restarts, leases, refusals,
// limits and the listings' filters.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	"hookgate/storage"
)

// The dedupe window is exact on the request's received time: a resend
// received 1 ns before DedupeUntil is a replay, one received at
// DedupeUntil is a new event (testIngestExpiry only checks well after).
func testDedupeWindowIsExact(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	first := Event("acme", "stripe", "w", "b", now, "ep")
	must(s.Ingest(ctx, first))
	inside := Event("acme", "stripe", "w", "b", first.DedupeUntil.Add(-time.Nanosecond))
	if r := must(s.Ingest(ctx, inside)); !r.Replayed || string(r.Response.Body) != string(first.Response.Body) {
		t.Fatalf("resend 1ns before the window's end: %+v, want the first answer", r)
	}
	at := Event("acme", "stripe", "w", "other body", first.DedupeUntil)
	if r, err := s.Ingest(ctx, at); err != nil || r.Replayed {
		t.Fatalf("resend at the window's end: %+v %v, want a new event", r, err)
	}
}

// A mismatch (same ID, another body) is remembered across a restart too.
func testMismatchSurvivesRestart(t *testing.T, o Opener) {
	if o.Reopen == nil {
		t.Skip("engine has no reopen")
	}
	db, ctx, now := o.Open(t), context.Background(), time.Now().UTC()
	must(db.Ingest(ctx, Event("acme", "stripe", "m", "one", now, "ep")))
	db = o.Reopen(t, db)
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Ingest(ctx, Event("acme", "stripe", "m", "two", now)); !errors.Is(err, storage.ErrIdempotencyMismatch) {
		t.Fatalf("other body after restart: %v, want ErrIdempotencyMismatch", err)
	}
}

// A claim made before a restart is due again after it, at the latest when
// its lease ends (SPEC 4: a delivery claimed by a worker that dies is
// retried after its lease expires), and only once.
func testClaimSurvivesRestart(t *testing.T, o Opener) {
	if o.Reopen == nil {
		t.Skip("engine has no reopen")
	}
	db, ctx, now := o.Open(t), context.Background(), time.Now().UTC()
	must(db.Ingest(ctx, Event("acme", "stripe", "c", "b", now, "ep")))
	jobs := must(db.Claim(ctx, "ep", now, 10, time.Minute))
	if len(jobs) != 1 {
		t.Fatalf("claim: %+v", jobs)
	}
	db = o.Reopen(t, db)
	t.Cleanup(func() { _ = db.Close() })
	after := jobs[0].Delivery.LeaseUntil
	again := must(db.Claim(ctx, "ep", after, 10, time.Minute))
	if len(again) != 1 || again[0].Delivery.ID != jobs[0].Delivery.ID || string(again[0].Event.Body) != "b" {
		t.Fatalf("after restart and lease: %+v", again)
	}
	if more := must(db.Claim(ctx, "ep", after, 10, time.Minute)); len(more) != 0 {
		t.Fatalf("claimed twice: %+v", more)
	}
}

// Deliveries written claimed by Ingest (the hand-off) are held under their
// lease: not claimable before it ends, completable under it, and due again
// after it (the handing worker died).
func testIngestWritesClaimedDeliveries(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "h", "b", now, "ep", "ep")
	lease := now.Add(time.Minute)
	for i := range req.Deliveries {
		req.Deliveries[i].State, req.Deliveries[i].LeaseUntil = storage.StateDelivering, lease
	}
	must(s.Ingest(ctx, req))
	if jobs := must(s.Claim(ctx, "ep", now.Add(59*time.Second), 10, time.Minute)); len(jobs) != 0 {
		t.Fatalf("handed deliveries claimed under their lease: %+v", jobs)
	}
	if err := s.Complete(ctx, &storage.Outcome{Delivery: req.Deliveries[0].ID, Lease: lease, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}, State: storage.StateSucceeded}); err != nil {
		t.Fatalf("complete under the hand-off lease: %v", err)
	}
	jobs := must(s.Claim(ctx, "ep", lease, 10, time.Minute))
	if len(jobs) != 1 || jobs[0].Delivery.ID != req.Deliveries[1].ID {
		t.Fatalf("after the lease: %+v, want only the unfinished one", jobs)
	}
}

// Complete with CountAttempt false records the attempt without using the
// retry budget.
func testCompleteWithoutCountingAttempt(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	must(s.Ingest(ctx, Event("acme", "stripe", "p", "b", now, "ep")))
	j := must(s.Claim(ctx, "ep", now, 10, time.Minute))[0]
	if err := s.Complete(ctx, &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil, CountAttempt: false,
		Attempt: storage.Attempt{N: 1, At: now, Error: "paused"}, State: storage.StatePending, NextAttemptAt: now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	d := must(s.GetDelivery(ctx, j.Delivery.ID))
	atts := must(s.ListAttempts(ctx, j.Delivery.ID))
	if d.AttemptCount != 0 || d.State != storage.StatePending || len(atts) != 1 || atts[0].Error != "paused" {
		t.Fatalf("uncounted attempt: %+v %+v", d, atts)
	}
}

// Release moves only deliveries still held under the given lease; unknown
// ids are ignored.
func testReleaseOnlyUnderItsLease(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	must(s.Ingest(ctx, Event("acme", "stripe", "r", "b", now, "ep")))
	j := must(s.Claim(ctx, "ep", now, 10, time.Minute))[0]
	if err := s.Release(ctx, []string{j.Delivery.ID, "dlv_missing"}, j.Delivery.LeaseUntil.Add(time.Second), now); err != nil {
		t.Fatal(err)
	}
	if d := must(s.GetDelivery(ctx, j.Delivery.ID)); d.State != storage.StateDelivering {
		t.Fatalf("released under another lease: %+v", d)
	}
	if jobs := must(s.Claim(ctx, "ep", now, 10, time.Minute)); len(jobs) != 0 {
		t.Fatalf("claimable after a release under another lease: %+v", jobs)
	}
}

// Release with a zero due time gives each delivery back due when it was
// before its claim: claims still take the earliest due first.
func testReleaseKeepingDueTimes(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC().Truncate(time.Millisecond)
	early, late := Event("acme", "stripe", "early", "b", now, "ep"), Event("acme", "stripe", "late", "b", now, "ep")
	early.Deliveries[0].NextAttemptAt = now.Add(-time.Hour)
	late.Deliveries[0].NextAttemptAt = now.Add(-time.Minute)
	must(s.Ingest(ctx, late))
	must(s.Ingest(ctx, early))
	jobs := must(s.Claim(ctx, "ep", now, 10, time.Minute))
	if len(jobs) != 2 {
		t.Fatalf("claimed %d, want 2", len(jobs))
	}
	ids := []string{jobs[0].Delivery.ID, jobs[1].Delivery.ID}
	if err := s.Release(ctx, ids, jobs[0].Delivery.LeaseUntil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []storage.Delivery{early.Deliveries[0], late.Deliveries[0]} {
		d := must(s.GetDelivery(ctx, want.ID))
		if d.State != storage.StatePending || !d.NextAttemptAt.Equal(want.NextAttemptAt) {
			t.Fatalf("released %s: %s due %v, want pending due %v", d.ID, d.State, d.NextAttemptAt, want.NextAttemptAt)
		}
	}
	if due, ok := must2(s.NextDue(ctx, "ep")); !ok || due.After(now.Add(-time.Hour)) {
		t.Fatalf("next due %v %v, want the earliest, %v", due, ok, now.Add(-time.Hour))
	}
	if j := must(s.Claim(ctx, "ep", now, 1, time.Minute)); len(j) != 1 || j[0].Delivery.ID != early.Deliveries[0].ID {
		t.Fatalf("a claim of one took %+v, want the earliest due", j)
	}
}

// Retry: ErrConflict for a cancelled delivery, ErrNotFound for none.
func testRetryRefusals(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "x", "b", now, "gone")
	must(s.Ingest(ctx, req))
	must(s.CancelEndpoint(ctx, "gone"))
	if _, err := s.Retry(ctx, req.Deliveries[0].ID, now); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("retry of a cancelled delivery: %v, want ErrConflict", err)
	}
	if _, err := s.Retry(ctx, "dlv_missing", now); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("retry of a missing delivery: %v, want ErrNotFound", err)
	}
}

// CancelEndpoint cancels claimed deliveries too (their late outcome is
// ErrLeaseLost) and leaves finished ones as they are.
func testCancelEndpointStates(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	done := Event("acme", "stripe", "c1", "b", now, "ep")
	claimed := Event("acme", "stripe", "c2", "b", now.Add(time.Millisecond), "ep")
	pending := Event("acme", "stripe", "c3", "b", now.Add(2*time.Millisecond), "ep")
	for _, r := range []*storage.IngestRequest{done, claimed, pending} {
		must(s.Ingest(ctx, r))
	}
	j := must(s.Claim(ctx, "ep", now, 1, time.Minute))[0]
	if err := s.Complete(ctx, &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}, State: storage.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	j2 := must(s.Claim(ctx, "ep", now.Add(time.Millisecond), 1, time.Minute))[0]
	if n := must(s.CancelEndpoint(ctx, "ep")); n != 2 {
		t.Fatalf("cancelled %d, want 2 (claimed and pending)", n)
	}
	for id, want := range map[string]storage.DeliveryState{j.Delivery.ID: storage.StateSucceeded,
		j2.Delivery.ID: storage.StateCancelled, pending.Deliveries[0].ID: storage.StateCancelled} {
		if d := must(s.GetDelivery(ctx, id)); d.State != want {
			t.Errorf("%s: %s, want %s", id, d.State, want)
		}
	}
	if err := s.Complete(ctx, &storage.Outcome{Delivery: j2.Delivery.ID, Lease: j2.Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}, State: storage.StateSucceeded}); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("late outcome of a cancelled claim: %v, want ErrLeaseLost", err)
	}
}

// Depth: claimed deliveries are live, due only once their lease ends;
// counts stop at limit.
func testDepth(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	for i := range 5 {
		must(s.Ingest(ctx, Event("acme", "stripe", fmt.Sprint("d", i), "b", now, "ep")))
	}
	must(s.Claim(ctx, "ep", now, 2, time.Minute))
	if live, due, err := s.Depth(ctx, "ep", now, 100); err != nil || live != 5 || due != 3 {
		t.Fatalf("depth %d live %d due (%v); want 5 and 3", live, due, err)
	}
	if live, due, err := s.Depth(ctx, "ep", now.Add(time.Minute), 100); err != nil || live != 5 || due != 5 {
		t.Fatalf("depth after the lease %d live %d due (%v); want 5 and 5", live, due, err)
	}
	if live, due, err := s.Depth(ctx, "ep", now, 2); err != nil || live != 2 || due > 2 {
		t.Fatalf("depth with limit 2: %d live %d due (%v)", live, due, err)
	}
}

// Listing filters and paging the suite leaves out: events by source and
// type; deliveries page by cursor, every one once, newest first; a bad
// delivery cursor is ErrBadCursor.
func testListFiltersAndDeliveryPaging(t *testing.T, o Opener) {
	s, ctx := open(t, o), context.Background()
	base := time.Now().UTC().Add(-time.Hour)
	var dls []string
	for i := range 12 {
		req := Event("acme", "stripe", fmt.Sprint("l", i), "b", base.Add(time.Duration(i)*time.Second), "ep")
		if i%3 == 0 {
			req.Key.Source, req.Event.Source = "github", "github"
		}
		if i%4 == 0 {
			req.Event.Type = "other.type"
		}
		must(s.Ingest(ctx, req))
		dls = append(dls, req.Deliveries[0].ID)
	}
	evs, _, err := s.ListEvents(ctx, storage.EventFilter{Source: "github", Limit: 100})
	if err != nil || len(evs) != 4 {
		t.Fatalf("source filter: %d events %v, want 4", len(evs), err)
	}
	evs, _, err = s.ListEvents(ctx, storage.EventFilter{Type: "other.type", Limit: 100})
	if err != nil || len(evs) != 3 {
		t.Fatalf("type filter: %d events %v, want 3", len(evs), err)
	}
	// The type filter is a glob (storage.MatchType), as Stripe's is.
	for glob, want := range map[string]int{"other.*": 3, "*.type": 3, "*": 12, "*.event": 9, "oth?r.typ[e]": 3, "other": 0, `other\.type`: 3} {
		evs, _, err = s.ListEvents(ctx, storage.EventFilter{Type: glob, Limit: 100})
		if err != nil || len(evs) != want {
			t.Fatalf("type filter %q: %d events %v, want %d", glob, len(evs), err, want)
		}
	}
	var got []string
	cursor := ""
	for range 20 {
		page, next, err := s.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "acme", Limit: 5, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page {
			got = append(got, d.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(got) != len(dls) {
		t.Fatalf("paged %d deliveries, want %d", len(got), len(dls))
	}
	for i := range got {
		if got[i] != dls[len(dls)-1-i] {
			t.Fatalf("delivery page order wrong at %d", i)
		}
	}
	if _, _, err := s.ListDeliveries(ctx, storage.DeliveryFilter{Cursor: "garbage!"}); !errors.Is(err, storage.ErrBadCursor) {
		t.Fatalf("bad delivery cursor: %v", err)
	}
}

// Purge: at most limit events per call, fewer only at the end of the
// pass; attempts go with their delivery.
func testPurgeLimitAndAttempts(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	old := now.Add(-2 * time.Hour)
	var first *storage.IngestRequest
	for i := range 5 {
		r := Event("acme", "stripe", fmt.Sprint("o", i), "b", old.Add(time.Duration(i)*time.Second), "ep")
		must(s.Ingest(ctx, r))
		if i == 0 {
			first = r
		}
	}
	j := must(s.Claim(ctx, "ep", old, 1, time.Minute))[0]
	if j.Delivery.ID != first.Deliveries[0].ID {
		t.Fatalf("claimed %s", j.Delivery.ID)
	}
	if err := s.Complete(ctx, &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: old, StatusCode: 200}, State: storage.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	var ns []int
	for range 4 {
		ns = append(ns, must(s.Purge(ctx, now.Add(-time.Hour), now.Add(-time.Hour), 2)))
	}
	if fmt.Sprint(ns) != "[2 2 1 0]" {
		t.Fatalf("purge counts %v, want [2 2 1 0]", ns)
	}
	if atts, err := s.ListAttempts(ctx, j.Delivery.ID); err != nil || len(atts) != 0 {
		t.Fatalf("attempts of a purged delivery: %+v %v", atts, err)
	}
	if ids := must(s.QueuedEndpoints(ctx)); len(ids) != 0 {
		t.Fatalf("outbox entries left by the purge: %v", ids)
	}
}

// Enqueue is all or nothing: a batch with one missing event writes none.
func testEnqueueIsAtomic(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "e", "b", now)
	must(s.Ingest(ctx, req))
	good := storage.Delivery{ID: storage.NewID("dlv_", now), Event: req.Event.ID, Tenant: "acme", Endpoint: "ep",
		State: storage.StatePending, CreatedAt: now, NextAttemptAt: now, RetryFrom: now, UpdatedAt: now}
	bad := good
	bad.ID, bad.Event = storage.NewID("dlv_", now), "evt_missing"
	if err := s.Enqueue(ctx, []storage.Delivery{good, bad}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("enqueue with a missing event: %v", err)
	}
	if _, err := s.GetDelivery(ctx, good.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("half of a failed enqueue was written: %v", err)
	}
}

// Catalog calls the suite does not make: GetSource, DeleteSource of an
// existing source, DeleteEndpoint of a missing one, PutEndpoint replacing;
// Ping on an open store; ListReplays of every state, oldest first.
func testCatalogAndReplays(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping of an open store: %v", err)
	}
	src := storage.Source{ID: "gh", Tenant: "acme", Verify: storage.VerifyConfig{Scheme: "github", Secrets: []string{"s"}}, EventID: "header:X"}
	if err := s.PutSource(ctx, &src); err != nil {
		t.Fatal(err)
	}
	if got := must(s.GetSource(ctx, "gh")); got.EventID != "header:X" || got.Verify.Secrets[0] != "s" {
		t.Fatalf("source: %+v", got)
	}
	if err := s.DeleteSource(ctx, "gh"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSource(ctx, "gh"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("deleted source: %v", err)
	}
	if err := s.DeleteEndpoint(ctx, "nope"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("delete of a missing endpoint: %v", err)
	}
	ep := storage.Endpoint{ID: "e", Tenant: "acme", URL: "https://a.example/"}
	_ = s.PutEndpoint(ctx, &ep)
	ep.URL = "https://b.example/"
	_ = s.PutEndpoint(ctx, &ep)
	if got := must(s.GetEndpoint(ctx, "e")); got.URL != ep.URL {
		t.Fatalf("put did not replace: %+v", got)
	}
	a := storage.ReplayJob{ID: storage.NewID("rpl_", now), Tenant: "acme", State: storage.ReplayCompleted, CreatedAt: now}
	b := storage.ReplayJob{ID: storage.NewID("rpl_", now.Add(time.Millisecond)), Tenant: "acme", State: storage.ReplayRunning, CreatedAt: now}
	_ = s.PutReplay(ctx, &a)
	_ = s.PutReplay(ctx, &b)
	all := must(s.ListReplays(ctx, ""))
	if len(all) != 2 || all[0].ID != a.ID || all[1].ID != b.ID {
		t.Fatalf("all replays: %+v", all)
	}
	if r := must(s.ListReplays(ctx, storage.ReplayRunning)); len(r) != 1 || r[0].ID != b.ID {
		t.Fatalf("running replays: %+v", r)
	}
}

// One claim takes storage.MaxClaim deliveries, whatever an engine's
// transactions hold; a larger limit may be capped at it.
func testClaimMaxClaim(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "big", "b", now, "ep")
	must(s.Ingest(ctx, req))
	for left := storage.MaxClaim; left > 0; {
		ds := make([]storage.Delivery, min(left, 500))
		for i := range ds {
			ds[i] = req.Deliveries[0]
			ds[i].ID = storage.NewID("dlv_", now)
		}
		ok(s.Enqueue(ctx, ds))
		left -= len(ds)
	}
	if jobs := must(s.Claim(ctx, "ep", now, storage.MaxClaim, time.Minute)); len(jobs) != storage.MaxClaim {
		t.Fatalf("a claim of MaxClaim took %d", len(jobs))
	}
	if jobs := must(s.Claim(ctx, "ep", now, 10*storage.MaxClaim, time.Minute)); len(jobs) != 1 {
		t.Fatalf("the claim of the rest took %d, want 1", len(jobs))
	}
}

// EnqueueReplay writes the deliveries and the job's progress together:
// with an event missing, neither; without deliveries, the progress alone.
func testEnqueueReplayIsAtomic(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "r", "b", now, "ep")
	must(s.Ingest(ctx, req))
	job := &storage.ReplayJob{ID: storage.NewID("rpl_", now), Tenant: "acme", State: storage.ReplayRunning, CreatedAt: now, UpdatedAt: now}
	ok(s.PutReplay(ctx, job))
	good := req.Deliveries[0]
	good.ID = storage.NewID("dlv_", now)
	bad := good
	bad.ID, bad.Event = storage.NewID("dlv_", now), storage.NewID("evt_", now)
	progress := *job
	progress.Enqueued, progress.Written = 2, req.Event.ID
	if err := s.EnqueueReplay(ctx, &progress, []storage.Delivery{good, bad}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("EnqueueReplay with a missing event: %v, want ErrNotFound", err)
	}
	if got := must(s.GetReplay(ctx, job.ID)); got.Enqueued != 0 || got.Written != "" {
		t.Fatalf("the job's progress was written without its deliveries: %+v", got)
	}
	if _, err := s.GetDelivery(ctx, good.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a delivery was written: %v", err)
	}
	progress.Enqueued = 1
	ok(s.EnqueueReplay(ctx, &progress, []storage.Delivery{good}))
	if got := must(s.GetReplay(ctx, job.ID)); got.Enqueued != 1 || got.Written != req.Event.ID {
		t.Fatalf("job after EnqueueReplay: %+v", got)
	}
	must(s.GetDelivery(ctx, good.ID))
	progress.Cursor, progress.Written, progress.State = "", "", storage.ReplayCompleted
	ok(s.EnqueueReplay(ctx, &progress, nil))
	if got := must(s.GetReplay(ctx, job.ID)); got.State != storage.ReplayCompleted {
		t.Fatalf("job after a progress-only EnqueueReplay: %+v", got)
	}
}

// A use of an admin key (IdemResult.Since) goes on across takeovers of a
// dead or given-up claim of the same request while it is remembered, also
// across a restart; another request is refused while it is remembered;
// a use is new once forgotten, and after the stored answer expired.
func testIdempotencyKeySince(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	h1, h2 := sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))
	claim := func(key string, h [32]byte, at time.Time) storage.IdemResult {
		return must(s.ClaimKey(ctx, storage.IdemClaim{Tenant: "acme", Key: key, RequestHash: h, Now: at,
			LeaseUntil: at.Add(30 * time.Second), Remember: at.Add(time.Hour)}))
	}
	first := claim("k", h1, now)
	if first.State != storage.IdemNew || !first.Since.Equal(now) {
		t.Fatalf("first claim: %+v, want new since %v", first, now)
	}
	// It died: the retry after its lease continues its use.
	second := claim("k", h1, now.Add(31*time.Second))
	if second.State != storage.IdemNew || !second.Since.Equal(now) {
		t.Fatalf("taking over a dead claim: %+v, want since %v", second, now)
	}
	// It gave the key up after a 5xx: the retry continues too.
	ok(s.AbandonKey(ctx, "acme", "k", second.LeaseUntil))
	if o.Reopen != nil {
		s = o.Reopen(t, s) // the old one's Close (open's cleanup) does nothing
		t.Cleanup(func() { _ = s.Close() })
	}
	third := claim("k", h1, now.Add(40*time.Second))
	if third.State != storage.IdemNew || !third.Since.Equal(now) {
		t.Fatalf("after AbandonKey and a restart: %+v, want since %v", third, now)
	}
	// Once its use is forgotten, the same request begins a new one.
	late := now.Add(2 * time.Hour)
	if r := claim("k", h1, late); r.State != storage.IdemNew || !r.Since.Equal(late) {
		t.Fatalf("after Remember: %+v, want since %v", r, late)
	}
	// A dead claim may have had its effect: while its use is remembered,
	// another request under the key is a reuse; once forgotten, it begins
	// a use of its own.
	claim("k2", h1, now)
	if r := claim("k2", h2, now.Add(31*time.Second)); r.State != storage.IdemMismatch {
		t.Fatalf("another request on a dead claim: %+v, want mismatch", r)
	}
	if r := claim("k2", h2, late); r.State != storage.IdemNew || !r.Since.Equal(late) {
		t.Fatalf("another request once the dead claim is forgotten: %+v", r)
	}
	// An answered key used again after its answer expired: a new use.
	r := claim("k3", h1, now)
	ok(s.FinishKey(ctx, "acme", "k3", r.LeaseUntil, storage.Response{Status: 201}, now.Add(time.Minute)))
	if r := claim("k3", h1, now.Add(2*time.Minute)); r.State != storage.IdemNew || !r.Since.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("after the answer expired: %+v", r)
	}
}

// EndpointHold: an outcome's Hold is kept per endpoint in the same write,
// the later one wins (an earlier hold of the same URL does not shorten
// it), a hold of another URL replaces it, an outcome dropped with its
// lease keeps none, it lasts across a restart, and it is gone once it
// has passed.
func testEndpointHold(t *testing.T, o Opener) {
	s, ctx, now := o.Open(t), context.Background(), time.Now().UTC()
	t.Cleanup(func() { _ = s.Close() })
	if until, url, err := s.EndpointHold(ctx, "ep", now); err != nil || !until.IsZero() || url != "" {
		t.Fatalf("hold of an endpoint that never asked: %v %q %v, want none", until, url, err)
	}
	complete := func(id string, at, hold time.Time, url string) error {
		t.Helper()
		must(s.Ingest(ctx, Event("acme", "stripe", id, "b", at, "ep")))
		j := must(s.Claim(ctx, "ep", at, 1, time.Minute))
		if len(j) != 1 {
			t.Fatalf("claim of %s: %d jobs", id, len(j))
		}
		return s.Complete(ctx, &storage.Outcome{Delivery: j[0].Delivery.ID, Lease: j[0].Delivery.LeaseUntil, CountAttempt: true,
			Attempt: storage.Attempt{N: 1, At: at, StatusCode: 503}, State: storage.StateFailed, Hold: hold, HoldURL: url})
	}
	check := func(what string, at, wantUntil time.Time, wantURL string) {
		t.Helper()
		until, url, err := s.EndpointHold(ctx, "ep", at)
		if err != nil || !until.Equal(wantUntil) || url != wantURL {
			t.Fatalf("%s: hold %v at %q (err %v), want %v at %q", what, until, url, err, wantUntil, wantURL)
		}
	}
	long := now.Add(time.Hour)
	if err := complete("h1", now, long, "https://a.example/hook"); err != nil {
		t.Fatal(err)
	}
	check("after a 503 asking for an hour", now, long, "https://a.example/hook")
	if err := complete("h2", now.Add(time.Millisecond), now.Add(time.Minute), "https://a.example/hook"); err != nil {
		t.Fatal(err)
	}
	check("after a shorter hold of the same URL", now, long, "https://a.example/hook")
	if err := complete("h3", now.Add(2*time.Millisecond), time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	check("after an outcome without a hold", now, long, "https://a.example/hook")
	short := now.Add(2 * time.Minute)
	if err := complete("h4", now.Add(3*time.Millisecond), short, "https://b.example/hook"); err != nil {
		t.Fatal(err)
	}
	check("after a hold asked by the endpoint's new URL", now, short, "https://b.example/hook")
	// An outcome whose lease was lost writes nothing, its hold neither.
	must(s.Ingest(ctx, Event("acme", "stripe", "h5", "b", now.Add(4*time.Millisecond), "ep")))
	j := must(s.Claim(ctx, "ep", now.Add(4*time.Millisecond), 1, time.Minute))[0]
	if err := s.Complete(ctx, &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil.Add(time.Second), CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now}, State: storage.StateFailed, Hold: long, HoldURL: "https://b.example/hook"}); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("outcome under a lease not held: %v, want ErrLeaseLost", err)
	}
	check("after an outcome dropped with its lease", now, short, "https://b.example/hook")
	if o.Reopen != nil {
		s = o.Reopen(t, s)
		t.Cleanup(func() { _ = s.Close() })
		check("after a restart", now, short, "https://b.example/hook")
	}
	check("once it has passed", short, time.Time{}, "")
	// A success that ends the hold (an operator's retry went through).
	must(s.Ingest(ctx, Event("acme", "stripe", "h6", "b", now.Add(5*time.Millisecond), "ep")))
	j = must(s.Claim(ctx, "ep", now.Add(5*time.Millisecond), 1, time.Minute))[0]
	if err := s.Complete(ctx, &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}, State: storage.StateSucceeded, EndHold: true}); err != nil {
		t.Fatal(err)
	}
	check("after a success that ends it", now, time.Time{}, "")
	if until, _, err := s.EndpointHold(ctx, "other", now); err != nil || !until.IsZero() {
		t.Fatalf("another endpoint's hold: %v %v, want none", until, err)
	}
}
