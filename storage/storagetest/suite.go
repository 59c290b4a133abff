// Package storagetest is the conformance suite every storage engine runs:
// the promises of package storage, checked against a real engine.
package storagetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
)

// Opener opens a fresh, empty store for one test. The suite closes it.
// Reopen, when not nil, closes the store and opens it again on the same
// data (a restart). Peer, when not nil, opens a second handle on the
// same data while the first stays open, as a second gateway on one
// database does: the races the suite runs then run across the two (an
// embedded engine, which one process owns, has none).
type Opener struct {
	Open   func(t *testing.T) storage.Store
	Reopen func(t *testing.T, s storage.Store) storage.Store
	Peer   func(t *testing.T, s storage.Store) storage.Store
}

// Run runs the whole suite.
func Run(t *testing.T, o Opener) {
	tests := map[string]func(*testing.T, Opener){
		"IngestThenReplay":                  testIngestThenReplay,
		"IngestMismatch":                    testIngestMismatch,
		"IngestScopes":                      testIngestScopes,
		"IngestConcurrent":                  testIngestConcurrent,
		"IngestExpiry":                      testIngestExpiry,
		"IngestSurvivesRestart":             testIngestSurvivesRestart,
		"ClaimCompleteRetry":                testClaimCompleteRetry,
		"ClaimLeaseExpiry":                  testClaimLeaseExpiry,
		"CompleteLeaseLost":                 testCompleteLeaseLost,
		"ReleaseAndNextDue":                 testReleaseAndNextDue,
		"EnqueueAndRetry":                   testEnqueueAndRetry,
		"RetryWaitsForAnAttempt":            testRetryWaitsForAnAttempt,
		"QueuedEndpoints":                   testQueuedEndpoints,
		"CancelEndpoint":                    testCancelEndpoint,
		"EarlierDueAfterClaims":             testEarlierDueAfterClaims,
		"ClaimsRaceInserts":                 testClaimsRaceInserts,
		"ListEventsPaging":                  testListEventsPaging,
		"ListEventsPageBytes":               testListEventsPageBytes,
		"PurgeKeepsLongRetryWindows":        testPurgeKeepsLongRetryWindows,
		"ListTimeBoundsExact":               testListTimeBoundsExact,
		"ListDeliveriesFilters":             testListDeliveriesFilters,
		"Catalog":                           testCatalog,
		"UpdateEndpoint":                    testUpdateEndpoint,
		"IdempotencyKeys":                   testIdempotencyKeys,
		"IdempotencyConcurrent":             testIdempotencyConcurrent,
		"IdempotencyKeySince":               testIdempotencyKeySince,
		"Replays":                           testReplays,
		"Purge":                             testPurge,
		"PurgeKeepsFreshRetries":            testPurgeKeepsFreshRetries,
		"ClosedStoreRefusesWrites":          testClosed,
		"DedupeWindowIsExact":               testDedupeWindowIsExact,
		"MismatchSurvivesRestart":           testMismatchSurvivesRestart,
		"ClaimSurvivesRestart":              testClaimSurvivesRestart,
		"IngestWritesClaimedDeliveries":     testIngestWritesClaimedDeliveries,
		"CompleteWithoutCountingAttempt":    testCompleteWithoutCountingAttempt,
		"ReleaseOnlyUnderItsLease":          testReleaseOnlyUnderItsLease,
		"ReleaseKeepingDueTimes":            testReleaseKeepingDueTimes,
		"RetryRefusals":                     testRetryRefusals,
		"CancelEndpointStates":              testCancelEndpointStates,
		"Depth":                             testDepth,
		"ListFiltersAndDeliveryPaging":      testListFiltersAndDeliveryPaging,
		"EndpointHold":                      testEndpointHold,
		"PurgeLimitAndAttempts":             testPurgeLimitAndAttempts,
		"EnqueueIsAtomic":                   testEnqueueIsAtomic,
		"CatalogAndReplays":                 testCatalogAndReplays,
		"ClaimMaxClaim":                     testClaimMaxClaim,
		"EnqueueReplayIsAtomic":             testEnqueueReplayIsAtomic,
		"PurgeReplays":                      testPurgeReplays,
		"CompleteCancelled":                 testCompleteCancelled,
		"ClaimOldestDueFirst":               testClaimOldestDueFirst,
		"CursorSurvivesPurgeAndRestart":     testCursorSurvivesPurgeAndRestart,
		"ReleaseLeavesFinishedAndCancelled": testReleaseLeavesFinishedAndCancelled,
		"IdempotencyLeaseAndZeroRemember":   testIdempotencyLeaseAndZeroRemember,
		"ClosedStoreRefusesEverything":      testClosedStoreRefusesEverything,
		"RetryOfPendingAndSucceeded":        testRetryOfPendingAndSucceeded,
		"TenantFilters":                     testTenantFilters,
		"EventStates":                       testEventStates,
		"EnqueueRacesPurge":                 testEnqueueRacesPurge,
		"PurgeKeepsDedupeRecords":           testPurgeKeepsDedupeRecords,
		"MissingRecords":                    testMissingRecords,
		"FarFutureDedupeWindow":             testFarFutureDedupeWindow,
		"LeaseTakenOverByAPeer":             testLeaseTakenOverByAPeer,
		"OutsideBytesKeptExactly":           testOutsideBytesKeptExactly,
		"GatedRateIsShared":                 testGatedRateIsShared,
		"GatedCircuitIsShared":              testGatedCircuitIsShared,
		"GatedReleasedProbe":                testGatedReleasedProbe,
		"GatedHoldIsShared":                 testGatedHoldIsShared,
		"GatedEndpointChangeResets":         testGatedEndpointChangeResets,
		"CompleteStoresNotices":             testCompleteStoresNotices,
		"NoticeLostWithLease":               testNoticeLostWithLease,
		"ChangeEndpointNotice":              testChangeEndpointNotice,
		"GatedCircuitNotices":               testGatedCircuitNotices,
		"ConcurrentNotices":                 testConcurrentNotices,
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					f, isFailure := r.(failure)
					if !isFailure {
						panic(r)
					}
					t.Fatalf("unexpected error: %v", f.err)
				}
			}()
			fn(t, o)
		})
	}
}

func open(t *testing.T, o Opener) storage.Store {
	t.Helper()
	s := o.Open(t)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// handles returns s and, when the engine has peers, a second handle on
// its data: a race test spreads its callers over them, so that on a
// shared database it races two gateways, not two goroutines of one.
func handles(t *testing.T, o Opener, s storage.Store) []storage.Store {
	t.Helper()
	if o.Peer == nil {
		return []storage.Store{s}
	}
	p := o.Peer(t, s)
	t.Cleanup(func() { _ = p.Close() })
	return []storage.Store{s, p}
}

// Event builds an accept request for the provider event (tenant, source,
// id) with body, received at now, and one delivery per endpoint, due at
// now: what an ingest writes. Engines' own tests use it too.
func Event(tenant, source, id, body string, now time.Time, endpoints ...string) *storage.IngestRequest {
	evt := storage.NewID("evt_", now)
	req := &storage.IngestRequest{
		Key:         storage.DedupeKey{Tenant: tenant, Source: source, EventID: id},
		BodyHash:    sha256.Sum256([]byte(body)),
		DedupeUntil: now.Add(time.Hour),
		Event: storage.Event{
			ID: evt, Tenant: tenant, Source: source, EventID: id, Type: "test.event",
			ReceivedAt: now, ContentType: "application/json", Body: []byte(body),
			Headers:        map[string]string{"X-Test": "1"},
			IdempotencyKey: storage.IdempotencyKey(tenant, source, id),
		},
		Response: storage.Response{Status: 202, Body: []byte(fmt.Sprintf(`{"id":%q,"event_id":%q}`, evt, id))},
	}
	for _, ep := range endpoints {
		req.Deliveries = append(req.Deliveries, storage.Delivery{
			ID: storage.NewID("dlv_", now), Event: evt, Tenant: tenant, Endpoint: ep,
			IdempotencyKey: req.Event.IdempotencyKey, State: storage.StatePending,
			CreatedAt: now, NextAttemptAt: now, RetryFrom: now, UpdatedAt: now,
		})
	}
	return req
}

// failure carries an unexpected error from must to the test's recover.
type failure struct{ err error }

// must returns v, or fails the running test when err is not nil (Run
// recovers the failure and reports it with t.Fatal).
func must[T any](v T, err error) T {
	if err != nil {
		panic(failure{err})
	}
	return v
}

// ok fails the running test when err is not nil.
func ok(err error) {
	if err != nil {
		panic(failure{err})
	}
}

func testIngestThenReplay(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "evt_1", `{"a":1}`, now, "ep1")
	res := must(s.Ingest(ctx, req))
	if res.Replayed || res.Response.Status != 202 {
		t.Fatalf("first accept: %+v", res)
	}
	again := Event("acme", "stripe", "evt_1", `{"a":1}`, now)
	res2 := must(s.Ingest(ctx, again))
	if !res2.Replayed || string(res2.Response.Body) != string(req.Response.Body) {
		t.Fatalf("replay: got %+v, want body %s", res2, req.Response.Body)
	}
	if _, err := s.GetEvent(ctx, again.Event.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a replay stored a second event: %v", err)
	}
	ev := must(s.GetEvent(ctx, req.Event.ID))
	if string(ev.Body) != `{"a":1}` || ev.Headers["X-Test"] != "1" || ev.EventID != "evt_1" {
		t.Fatalf("stored event: %+v", ev)
	}
	ds, _ := must2(s.ListDeliveries(ctx, storage.DeliveryFilter{Event: req.Event.ID}))
	if len(ds) != 1 || ds[0].Endpoint != "ep1" || ds[0].State != storage.StatePending {
		t.Fatalf("deliveries: %+v", ds)
	}
}

// must2 is must for two results.
func must2[A, B any](a A, b B, err error) (A, B) {
	ok(err)
	return a, b
}

func testIngestMismatch(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	must(s.Ingest(ctx, Event("acme", "stripe", "x", "one", now)))
	_, err := s.Ingest(ctx, Event("acme", "stripe", "x", "two", now))
	if !errors.Is(err, storage.ErrIdempotencyMismatch) {
		t.Fatalf("different body: got %v, want ErrIdempotencyMismatch", err)
	}
}

func testIngestScopes(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	for _, k := range [][2]string{{"acme", "stripe"}, {"other", "stripe"}, {"acme", "github"}} {
		res := must(s.Ingest(ctx, Event(k[0], k[1], "same-id", "body-"+k[0]+k[1], now)))
		if res.Replayed {
			t.Fatalf("%v: same ID in another scope was treated as a duplicate", k)
		}
	}
}

func testIngestConcurrent(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	hs := handles(t, o, s)
	const n = 64
	var wg sync.WaitGroup
	results := make([]storage.IngestResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = hs[i%len(hs)].Ingest(ctx, Event("acme", "stripe", "race", "body", now, "ep1"))
		}()
	}
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !results[i].Replayed {
			fresh++
		}
		if string(results[i].Response.Body) != string(results[0].Response.Body) {
			t.Fatalf("answers differ: %s vs %s", results[i].Response.Body, results[0].Response.Body)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d requests were accepted as new, want exactly 1", fresh)
	}
	evs, _ := must2(s.ListEvents(ctx, storage.EventFilter{}))
	ds, _ := must2(s.ListDeliveries(ctx, storage.DeliveryFilter{}))
	if len(evs) != 1 || len(ds) != 1 {
		t.Fatalf("stored %d events and %d deliveries, want 1 and 1", len(evs), len(ds))
	}
}

func testIngestExpiry(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "short", "one", now)
	req.DedupeUntil = now.Add(1500 * time.Millisecond)
	must(s.Ingest(ctx, req))
	// Once the window has passed, the ID is new again, even with another body.
	later := Event("acme", "stripe", "short", "two", now.Add(2*time.Second))
	res, err := s.Ingest(ctx, later)
	if err != nil || res.Replayed {
		t.Fatalf("dedupe record did not expire: %+v %v", res, err)
	}
	// And the new record is the one remembered now.
	res, err = s.Ingest(ctx, Event("acme", "stripe", "short", "two", now.Add(3*time.Second)))
	if err != nil || !res.Replayed || string(res.Response.Body) != string(later.Response.Body) {
		t.Fatalf("after expiry the new answer is not remembered: %+v %v", res, err)
	}
}

func testIngestSurvivesRestart(t *testing.T, o Opener) {
	if o.Reopen == nil {
		t.Skip("engine has no reopen")
	}
	s, ctx, now := o.Open(t), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "durable", "body", now, "ep1")
	must(s.Ingest(ctx, req))
	s = o.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	res := must(s.Ingest(ctx, Event("acme", "stripe", "durable", "body", now)))
	if !res.Replayed || string(res.Response.Body) != string(req.Response.Body) {
		t.Fatalf("after restart: %+v", res)
	}
	jobs := must(s.Claim(ctx, "ep1", now, 10, time.Minute))
	if len(jobs) != 1 || string(jobs[0].Event.Body) != "body" {
		t.Fatalf("pending delivery lost in restart: %+v", jobs)
	}
}

func testClaimCompleteRetry(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "c1", "body", now, "ep1", "ep2")
	must(s.Ingest(ctx, req))
	jobs := must(s.Claim(ctx, "ep1", now, 10, time.Minute))
	if len(jobs) != 1 || jobs[0].Delivery.Endpoint != "ep1" || jobs[0].Delivery.State != storage.StateDelivering {
		t.Fatalf("claim: %+v", jobs)
	}
	if again := must(s.Claim(ctx, "ep1", now, 10, time.Minute)); len(again) != 0 {
		t.Fatalf("a leased delivery was claimed twice: %+v", again)
	}
	d := jobs[0].Delivery
	next := now.Add(5 * time.Second)
	ok(s.Complete(ctx, &storage.Outcome{
		Delivery: d.ID, Lease: d.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 500, Error: "HTTP 500", Response: "oops"},
		State:   storage.StatePending, NextAttemptAt: next, Interval: 5 * time.Second,
	}))
	if early := must(s.Claim(ctx, "ep1", now.Add(time.Second), 10, time.Minute)); len(early) != 0 {
		t.Fatalf("claimed before its due time: %+v", early)
	}
	jobs = must(s.Claim(ctx, "ep1", next, 10, time.Minute))
	if len(jobs) != 1 || jobs[0].Delivery.AttemptCount != 1 || jobs[0].Delivery.Interval != 5*time.Second {
		t.Fatalf("retry claim: %+v", jobs)
	}
	d = jobs[0].Delivery
	ok(s.Complete(ctx, &storage.Outcome{
		Delivery: d.ID, Lease: d.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 2, At: next, StatusCode: 200}, State: storage.StateSucceeded,
	}))
	got := must(s.GetDelivery(ctx, d.ID))
	atts := must(s.ListAttempts(ctx, d.ID))
	if got.State != storage.StateSucceeded || got.AttemptCount != 2 || len(atts) != 2 || atts[0].Response != "oops" || atts[1].StatusCode != 200 {
		t.Fatalf("final: %+v attempts %+v", got, atts)
	}
	if more := must(s.Claim(ctx, "ep1", next.Add(time.Hour), 10, time.Minute)); len(more) != 0 {
		t.Fatalf("a succeeded delivery was claimed: %+v", more)
	}
	if other := must(s.Claim(ctx, "ep2", now, 10, time.Minute)); len(other) != 1 {
		t.Fatalf("ep2's delivery: %+v", other)
	}
}

func testClaimLeaseExpiry(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	must(s.Ingest(ctx, Event("acme", "stripe", "l1", "body", now, "ep1")))
	first := must(s.Claim(ctx, "ep1", now, 10, time.Minute))
	// The worker died: no Complete. After the lease the delivery is due again.
	if got := must(s.Claim(ctx, "ep1", now.Add(59*time.Second), 10, time.Minute)); len(got) != 0 {
		t.Fatalf("claimed under a live lease: %+v", got)
	}
	again := must(s.Claim(ctx, "ep1", now.Add(61*time.Second), 10, time.Minute))
	if len(again) != 1 || again[0].Delivery.ID != first[0].Delivery.ID {
		t.Fatalf("expired lease not reclaimed: %+v", again)
	}
	// The dead worker's late outcome must not overwrite the new claim.
	err := s.Complete(ctx, &storage.Outcome{Delivery: first[0].Delivery.ID, Lease: first[0].Delivery.LeaseUntil,
		Attempt: storage.Attempt{N: 1, At: now}, State: storage.StateSucceeded, CountAttempt: true})
	if !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("stale complete: got %v, want ErrLeaseLost", err)
	}
}

func testCompleteLeaseLost(t *testing.T, o Opener) {
	s, ctx := open(t, o), context.Background()
	// A delivery that is not there (retention purged it under its claim)
	// is not held.
	err := s.Complete(ctx, &storage.Outcome{Delivery: "dlv_missing", State: storage.StateSucceeded})
	if !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("complete of unknown delivery: %v, want ErrLeaseLost", err)
	}
}

func testReleaseAndNextDue(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	if _, found := must2(s.NextDue(ctx, "ep1")); found {
		t.Fatal("empty outbox has a due time")
	}
	must(s.Ingest(ctx, Event("acme", "stripe", "r1", "body", now, "ep1")))
	due, found := must2(s.NextDue(ctx, "ep1"))
	if !found || !due.Equal(now) {
		t.Fatalf("next due %v %v, want %v", due, found, now)
	}
	jobs := must(s.Claim(ctx, "ep1", now, 10, time.Minute))
	if due, _ = must2(s.NextDue(ctx, "ep1")); !due.Equal(now.Add(time.Minute)) {
		t.Fatalf("next due while leased = %v, want the lease expiry", due)
	}
	later := now.Add(10 * time.Second)
	ok(s.Release(ctx, []string{jobs[0].Delivery.ID}, jobs[0].Delivery.LeaseUntil, later))
	d := must(s.GetDelivery(ctx, jobs[0].Delivery.ID))
	if d.State != storage.StatePending || d.AttemptCount != 0 || !d.NextAttemptAt.Equal(later) {
		t.Fatalf("released: %+v", d)
	}
	if due, _ = must2(s.NextDue(ctx, "ep1")); !due.Equal(later) {
		t.Fatalf("next due after release = %v", due)
	}
}

func testEnqueueAndRetry(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "e1", "body", now, "ep1")
	must(s.Ingest(ctx, req))
	d := req.Deliveries[0]
	d.ID = storage.NewID("dlv_", now)
	ok(s.Enqueue(ctx, []storage.Delivery{d}))
	jobs := must(s.Claim(ctx, "ep1", now, 10, time.Minute))
	if len(jobs) != 2 || jobs[0].Delivery.IdempotencyKey != jobs[1].Delivery.IdempotencyKey {
		t.Fatalf("replayed delivery: %+v", jobs)
	}
	for _, j := range jobs {
		ok(s.Complete(ctx, &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil, CountAttempt: true,
			Attempt: storage.Attempt{N: 1, At: now, StatusCode: 400}, State: storage.StateFailed}))
	}
	later := now.Add(time.Hour)
	r := must(s.Retry(ctx, d.ID, later))
	if r.State != storage.StatePending || !r.RetryFrom.Equal(later) {
		t.Fatalf("retry: %+v", r)
	}
	if again := must(s.Claim(ctx, "ep1", later, 10, time.Minute)); len(again) != 1 || again[0].Delivery.ID != d.ID {
		t.Fatalf("retried delivery not due: %+v", again)
	}
	bad := d
	bad.ID, bad.Event = storage.NewID("dlv_", now), "evt_missing"
	if err := s.Enqueue(ctx, []storage.Delivery{bad}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("enqueue for a missing event: %v", err)
	}
}

// testRetryWaitsForAnAttempt: a manual retry of a delivery whose attempt
// is in flight would cost that attempt its lease, so its outcome would go
// unrecorded; it is refused until the attempt ends or its lease runs out
// (a worker that died).
func testRetryWaitsForAnAttempt(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "inflight", "body", now, "ep1")
	must(s.Ingest(ctx, req))
	jobs := must(s.Claim(ctx, "ep1", now, 10, time.Minute))
	if len(jobs) != 1 {
		t.Fatalf("claim: %+v", jobs)
	}
	id := jobs[0].Delivery.ID
	if _, err := s.Retry(ctx, id, now.Add(time.Second)); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("retry while the attempt is in flight: %v, want ErrConflict", err)
	}
	ok(s.Complete(ctx, &storage.Outcome{Delivery: id, Lease: jobs[0].Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 500}, State: storage.StatePending, NextAttemptAt: now.Add(time.Hour)}))
	if as := must(s.ListAttempts(ctx, id)); len(as) != 1 {
		t.Fatalf("attempts after the refused retry: %+v", as)
	}
	if r := must(s.Retry(ctx, id, now.Add(time.Second))); r.State != storage.StatePending || !r.NextAttemptAt.Equal(now.Add(time.Second)) {
		t.Fatalf("retry after the attempt: %+v", r)
	}
	// A worker that died: once its lease is over the delivery may be retried.
	jobs = must(s.Claim(ctx, "ep1", now.Add(time.Second), 10, time.Minute))
	if len(jobs) != 1 {
		t.Fatalf("claim of the retried delivery: %+v", jobs)
	}
	if r := must(s.Retry(ctx, id, jobs[0].Delivery.LeaseUntil.Add(time.Second))); r.State != storage.StatePending {
		t.Fatalf("retry after the lease ran out: %+v", r)
	}
}

// testQueuedEndpoints: the endpoints with live deliveries, pending or
// claimed, are listed once each; finished and cancelled ones are not.
func testQueuedEndpoints(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	if ids := must(s.QueuedEndpoints(ctx)); len(ids) != 0 {
		t.Fatalf("empty store: %v", ids)
	}
	must(s.Ingest(ctx, Event("acme", "stripe", "q1", "body", now, "ep1", "ep2", "ep3", "ep4", "ep1x")))
	must(s.Ingest(ctx, Event("acme", "stripe", "q2", "body", now, "ep1", "ep2")))
	if jobs := must(s.Claim(ctx, "ep2", now, 10, time.Minute)); len(jobs) != 2 {
		t.Fatalf("claim ep2: %+v", jobs)
	}
	jobs := must(s.Claim(ctx, "ep3", now, 10, time.Minute))
	ok(s.Complete(ctx, &storage.Outcome{Delivery: jobs[0].Delivery.ID, Lease: jobs[0].Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}, State: storage.StateSucceeded}))
	must(s.CancelEndpoint(ctx, "ep4"))
	ids := must(s.QueuedEndpoints(ctx))
	slices.Sort(ids)
	if want := []string{"ep1", "ep1x", "ep2"}; !slices.Equal(ids, want) {
		t.Fatalf("queued endpoints %v, want %v", ids, want)
	}
}

// testEarlierDueAfterClaims: whatever an engine does to skip consumed
// outbox entries, a delivery due earlier than everything claimed so far is
// still found.
func testEarlierDueAfterClaims(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "fl", "b", now, "ep1", "ep1", "ep1")
	must(s.Ingest(ctx, req))
	for range 3 {
		jobs := must(s.Claim(ctx, "ep1", now, 1, time.Minute))
		ok(s.Complete(ctx, &storage.Outcome{Delivery: jobs[0].Delivery.ID, Lease: jobs[0].Delivery.LeaseUntil, CountAttempt: true,
			Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}, State: storage.StateSucceeded}))
	}
	if jobs := must(s.Claim(ctx, "ep1", now.Add(time.Hour), 10, time.Minute)); len(jobs) != 0 {
		t.Fatalf("claimed %d after all succeeded", len(jobs))
	}
	early := req.Deliveries[0]
	early.ID, early.NextAttemptAt = storage.NewID("dlv_", now), now.Add(-time.Hour)
	ok(s.Enqueue(ctx, []storage.Delivery{early}))
	if live, due := must2(s.Depth(ctx, "ep1", now, 100)); live != 1 || due != 1 {
		t.Fatalf("depth %d live, %d due; want 1 and 1", live, due)
	}
	if due, found := must2(s.NextDue(ctx, "ep1")); !found || !due.Equal(early.NextAttemptAt) {
		t.Fatalf("next due %v %v, want %v", due, found, early.NextAttemptAt)
	}
	jobs := must(s.Claim(ctx, "ep1", now, 10, time.Minute))
	if len(jobs) != 1 || jobs[0].Delivery.ID != early.ID {
		t.Fatalf("an earlier-due delivery was not claimed: %+v", jobs)
	}
	// A manual retry of a dead letter gets a fresh attempt budget.
	ok(s.Complete(ctx, &storage.Outcome{Delivery: early.ID, Lease: jobs[0].Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 500}, State: storage.StateFailed}))
	r := must(s.Retry(ctx, early.ID, now))
	if r.RetryBase != 1 || r.AttemptCount != 1 {
		t.Fatalf("retry budget: %+v", r)
	}
}

// testClaimsRaceInserts: deliveries inserted while a worker claims are all
// found in the end, whatever an engine does to skip consumed outbox
// entries: a claim must never move past an entry written concurrently.
func testClaimsRaceInserts(t *testing.T, o Opener) {
	s, ctx := open(t, o), context.Background()
	hs := handles(t, o, s)
	const writers, perWriter = 4, 50
	var mu sync.Mutex
	seen := map[string]bool{}
	mark := func(jobs []storage.Job) {
		mu.Lock()
		defer mu.Unlock()
		for _, j := range jobs {
			if seen[j.Delivery.ID] {
				t.Errorf("delivery %s claimed twice within its lease", j.Delivery.ID)
			}
			seen[j.Delivery.ID] = true
		}
	}
	done := make(chan struct{})
	var claimers, ws sync.WaitGroup
	// Two claimers, one per handle when there are two: no delivery may be
	// claimed by both (their claims last an hour).
	for c := range 2 {
		claimers.Go(func() {
			for {
				jobs, err := hs[c%len(hs)].Claim(ctx, "ep1", time.Now().UTC(), 8, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				mark(jobs)
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	for w := range writers {
		ws.Go(func() {
			for i := range perWriter {
				req := Event("acme", "stripe", fmt.Sprintf("race-%d-%d", w, i), "b", time.Now().UTC(), "ep1")
				if _, err := hs[w%len(hs)].Ingest(ctx, req); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	ws.Wait()
	close(done)
	claimers.Wait()
	// What the workers did not get is still due (their claims last an hour).
	for {
		jobs := must(s.Claim(ctx, "ep1", time.Now().UTC(), 100, time.Hour))
		if len(jobs) == 0 {
			break
		}
		mark(jobs)
	}
	if len(seen) != writers*perWriter {
		t.Fatalf("%d of %d deliveries were ever claimed: the others are pending but hidden", len(seen), writers*perWriter)
	}
}

func testCancelEndpoint(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	for i := range 5 {
		must(s.Ingest(ctx, Event("acme", "stripe", fmt.Sprint("k", i), "b", now, "gone", "kept")))
	}
	if n := must(s.CancelEndpoint(ctx, "gone")); n != 5 {
		t.Fatalf("cancelled %d, want 5", n)
	}
	if jobs := must(s.Claim(ctx, "gone", now.Add(time.Hour), 10, time.Minute)); len(jobs) != 0 {
		t.Fatalf("cancelled deliveries claimed: %d", len(jobs))
	}
	if jobs := must(s.Claim(ctx, "kept", now, 10, time.Minute)); len(jobs) != 5 {
		t.Fatalf("other endpoint: %d", len(jobs))
	}
}

// testListTimeBoundsExact: since and until bound received_at (events) and
// created_at (deliveries) exactly, inclusive, not at whole milliseconds.
func testListTimeBoundsExact(t *testing.T, o Opener) {
	s, ctx := open(t, o), context.Background()
	ms := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	early := Event("acme", "stripe", "early", "b", ms.Add(100*time.Microsecond), "ep")
	late := Event("acme", "stripe", "late", "b", ms.Add(900*time.Microsecond), "ep")
	must(s.Ingest(ctx, early))
	must(s.Ingest(ctx, late))
	cut := ms.Add(500 * time.Microsecond)
	for _, c := range []struct {
		since, until time.Time
		want         string
	}{
		{time.Time{}, cut, early.Event.ID},
		{cut, time.Time{}, late.Event.ID},
		{early.Event.ReceivedAt, early.Event.ReceivedAt, early.Event.ID}, // inclusive
	} {
		evs, _ := must2(s.ListEvents(ctx, storage.EventFilter{Tenant: "acme", Since: c.since, Until: c.until, Limit: 10}))
		if len(evs) != 1 || evs[0].ID != c.want {
			t.Errorf("events since %v until %v: %d, want only %s", c.since, c.until, len(evs), c.want)
		}
		ds, _ := must2(s.ListDeliveries(ctx, storage.DeliveryFilter{Endpoint: "ep", Since: c.since, Until: c.until, Limit: 10}))
		if len(ds) != 1 || ds[0].Event != c.want {
			t.Errorf("deliveries since %v until %v: %d, want only the one of %s", c.since, c.until, len(ds), c.want)
		}
	}
}

func testListEventsPaging(t *testing.T, o Opener) {
	s, ctx := open(t, o), context.Background()
	base := time.Now().UTC().Add(-time.Hour)
	var ids []string
	for i := range 25 {
		tenant := "acme"
		if i%5 == 0 {
			tenant = "other"
		}
		req := Event(tenant, "stripe", fmt.Sprint("p", i), "b", base.Add(time.Duration(i)*time.Second))
		must(s.Ingest(ctx, req))
		if tenant == "acme" {
			ids = append(ids, req.Event.ID)
		}
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		evs, next := must2(s.ListEvents(ctx, storage.EventFilter{Tenant: "acme", Limit: 7, Cursor: cursor}))
		for _, e := range evs {
			if e.Tenant != "acme" {
				t.Fatalf("tenant filter leaked %s", e.Tenant)
			}
			got = append(got, e.ID)
		}
		// Events arriving while paging must not disturb the walk.
		must(s.Ingest(ctx, Event("acme", "stripe", fmt.Sprint("new", pages), "b", time.Now().UTC())))
		if next == "" {
			break
		}
		cursor = next
	}
	if len(got) != len(ids) {
		t.Fatalf("paged %d events, want %d", len(got), len(ids))
	}
	for i := range got {
		if got[i] != ids[len(ids)-1-i] {
			t.Fatalf("page order wrong at %d: %s", i, got[i])
		}
	}
	since := base.Add(10 * time.Second)
	until := base.Add(14 * time.Second)
	evs, _ := must2(s.ListEvents(ctx, storage.EventFilter{Since: since, Until: until}))
	if len(evs) != 5 {
		t.Fatalf("since/until: %d events, want 5", len(evs))
	}
	if _, _, err := s.ListEvents(ctx, storage.EventFilter{Cursor: "garbage!"}); !errors.Is(err, storage.ErrBadCursor) {
		t.Fatalf("bad cursor: %v", err)
	}
}

// A page of large events ends short of storage.PageBytes, and its cursor
// leads on to every event once.
func testListEventsPageBytes(t *testing.T, o Opener) {
	s, ctx := open(t, o), context.Background()
	base := time.Now().UTC().Add(-time.Hour)
	body := strings.Repeat("a", 1<<20)
	want := map[string]bool{}
	for i := range storage.PageBytes>>20 + 4 {
		req := Event("acme", "stripe", fmt.Sprint("big", i), body, base.Add(time.Duration(i)*time.Millisecond))
		must(s.Ingest(ctx, req))
		want[req.Event.ID] = true
	}
	seen, cursor, pages := map[string]int{}, "", 0
	for ; ; pages++ {
		evs, next := must2(s.ListEvents(ctx, storage.EventFilter{Tenant: "acme", Limit: 1000, Cursor: cursor}))
		n := 0
		for _, e := range evs {
			seen[e.ID]++
			n += len(e.Body)
		}
		if len(evs) > 1 && n > storage.PageBytes {
			t.Fatalf("a page of %d events carries %d bytes of bodies, over PageBytes %d", len(evs), n, storage.PageBytes)
		}
		if cursor = next; cursor == "" || pages > len(want) {
			break
		}
	}
	if pages == 0 {
		t.Fatalf("%d events of 1 MiB came in one page", len(want))
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("event %s listed %d times across %d pages", id, seen[id], pages+1)
		}
	}
}

func testListDeliveriesFilters(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	must(s.Ingest(ctx, Event("acme", "stripe", "f1", "b", now, "ep1", "ep2")))
	must(s.Ingest(ctx, Event("other", "stripe", "f1", "b", now, "ep3")))
	jobs := must(s.Claim(ctx, "ep1", now, 1, time.Minute))
	ok(s.Complete(ctx, &storage.Outcome{Delivery: jobs[0].Delivery.ID, Lease: jobs[0].Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}, State: storage.StateSucceeded}))
	count := func(f storage.DeliveryFilter) int {
		ds, _ := must2(s.ListDeliveries(ctx, f))
		return len(ds)
	}
	for name, c := range map[string]struct {
		f    storage.DeliveryFilter
		want int
	}{
		"all":       {storage.DeliveryFilter{}, 3},
		"tenant":    {storage.DeliveryFilter{Tenant: "acme"}, 2},
		"endpoint":  {storage.DeliveryFilter{Endpoint: "ep2"}, 1},
		"state":     {storage.DeliveryFilter{State: storage.StateSucceeded}, 1},
		"pending":   {storage.DeliveryFilter{Tenant: "acme", State: storage.StatePending}, 1},
		"event":     {storage.DeliveryFilter{Event: jobs[0].Delivery.Event}, 2},
		"isolation": {storage.DeliveryFilter{Tenant: "other", Endpoint: "ep1"}, 0},
	} {
		if got := count(c.f); got != c.want {
			t.Errorf("%s: %d deliveries, want %d", name, got, c.want)
		}
	}
}

func testCatalog(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	ep := storage.Endpoint{ID: "billing", Tenant: "acme", URL: "https://example.com/h", Secrets: []storage.Secret{{Value: "whsec_x"}},
		EventTypes: []string{"invoice.*"}, MaxInFlight: 10, CreatedAt: now, UpdatedAt: now}
	ok(s.PutEndpoint(ctx, &ep))
	got := must(s.GetEndpoint(ctx, "billing"))
	if got.URL != ep.URL || got.Secrets[0].Value != "whsec_x" || got.EventTypes[0] != "invoice.*" {
		t.Fatalf("endpoint round trip: %+v", got)
	}
	src := storage.Source{ID: "stripe", Tenant: "acme", Verify: storage.VerifyConfig{Scheme: "stripe", Secrets: []string{"whsec_y"}}}
	ok(s.PutSource(ctx, &src))
	if l := must(s.ListSources(ctx)); len(l) != 1 || l[0].Verify.Secrets[0] != "whsec_y" {
		t.Fatalf("sources: %+v", l)
	}
	if l := must(s.ListEndpoints(ctx)); len(l) != 1 {
		t.Fatalf("endpoints: %+v", l)
	}
	ok(s.DeleteEndpoint(ctx, "billing"))
	if _, err := s.GetEndpoint(ctx, "billing"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("deleted endpoint: %v", err)
	}
	if err := s.DeleteSource(ctx, "nope"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("delete missing source: %v", err)
	}
}

// UpdateEndpoint is a read-modify-write without lost updates: concurrent
// updates of different fields all land, an error from the change writes
// nothing, and a missing endpoint is ErrNotFound.
func testUpdateEndpoint(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	ep := storage.Endpoint{ID: "ep", Tenant: "acme", URL: "https://example.com/h", MaxInFlight: 1, CreatedAt: now, UpdatedAt: now}
	ok(s.PutEndpoint(ctx, &ep))
	const n = 32
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := s.UpdateEndpoint(ctx, "ep", func(ep *storage.Endpoint) error {
				if i == 0 {
					ep.Disabled, ep.DisabledReason = true, "gone"
				}
				ep.MaxInFlight++
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got := must(s.GetEndpoint(ctx, "ep"))
	if got.MaxInFlight != 1+n || !got.Disabled || got.DisabledReason != "gone" || got.URL != ep.URL {
		t.Fatalf("after %d concurrent updates: %+v; want max_in_flight %d, disabled, URL kept", n, got, 1+n)
	}
	errStop := errors.New("no change")
	if _, err := s.UpdateEndpoint(ctx, "ep", func(ep *storage.Endpoint) error {
		ep.URL = "https://changed.example/"
		return errStop
	}); !errors.Is(err, errStop) {
		t.Fatalf("update whose change failed: %v, want its error", err)
	}
	if got := must(s.GetEndpoint(ctx, "ep")); got.URL != ep.URL {
		t.Fatalf("an aborted update wrote %q", got.URL)
	}
	if _, err := s.UpdateEndpoint(ctx, "nope", func(*storage.Endpoint) error { return nil }); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("update of a missing endpoint: %v", err)
	}
}

func testIdempotencyKeys(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	h1, h2 := sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))
	claim := func(tenant string, h [32]byte, at time.Time) storage.IdemResult {
		return must(s.ClaimKey(ctx, storage.IdemClaim{Tenant: tenant, Key: "k1", RequestHash: h, Now: at, LeaseUntil: at.Add(30 * time.Second)}))
	}
	first := claim("acme", h1, now)
	if first.State != storage.IdemNew {
		t.Fatalf("first claim: %+v", first)
	}
	if r := claim("acme", h1, now); r.State != storage.IdemInProgress {
		t.Fatalf("while running: %+v", r)
	}
	if r := claim("acme", h2, now); r.State != storage.IdemMismatch {
		t.Fatalf("other request while running: %+v", r)
	}
	if r := claim("other", h2, now); r.State != storage.IdemNew {
		t.Fatalf("keys are scoped per tenant: %+v", r)
	}
	// The first holder died: after its lease the next retry executes.
	second := claim("acme", h1, now.Add(31*time.Second))
	if second.State != storage.IdemNew {
		t.Fatalf("after lease expiry: %+v", second)
	}
	// Had it only stalled, it can neither store its answer over the new
	// holder's claim nor drop that claim.
	stale := storage.Response{Status: 500, Body: []byte(`stale`)}
	if err := s.FinishKey(ctx, "acme", "k1", first.LeaseUntil, stale, now.Add(time.Hour)); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("finish under a lost lease: %v, want ErrLeaseLost", err)
	}
	if err := s.AbandonKey(ctx, "acme", "k1", first.LeaseUntil); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("abandon under a lost lease: %v, want ErrLeaseLost", err)
	}
	if r := claim("acme", h1, now.Add(32*time.Second)); r.State != storage.IdemInProgress {
		t.Fatalf("the new holder's claim after a stale finish and abandon: %+v", r)
	}
	resp := storage.Response{Status: 202, Body: []byte(`{"ok":true}`)}
	ok(s.FinishKey(ctx, "acme", "k1", second.LeaseUntil, resp, now.Add(time.Hour)))
	if r := claim("acme", h1, now.Add(time.Minute)); r.State != storage.IdemReplay || string(r.Response.Body) != `{"ok":true}` || r.Response.Status != 202 {
		t.Fatalf("replay: %+v", r)
	}
	if r := claim("acme", h2, now.Add(time.Minute)); r.State != storage.IdemMismatch {
		t.Fatalf("reuse with another request: %+v", r)
	}
	third := claim("acme", h2, now.Add(2*time.Hour))
	if third.State != storage.IdemNew {
		t.Fatalf("after expiry: %+v", third)
	}
	ok(s.AbandonKey(ctx, "acme", "k1", third.LeaseUntil))
	// Given up (after a 5xx that may have had its effect), the key is
	// still that request's while remembered: another request is a reuse,
	// and the same request runs again.
	if r := claim("acme", h1, now.Add(2*time.Hour)); r.State != storage.IdemMismatch {
		t.Fatalf("another request after abandon: %+v, want mismatch", r)
	}
	if r := claim("acme", h2, now.Add(2*time.Hour)); r.State != storage.IdemNew {
		t.Fatalf("the same request after abandon: %+v", r)
	}
}

func testIdempotencyConcurrent(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	hs := handles(t, o, s)
	h := sha256.Sum256([]byte("req"))
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := 0
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := hs[i%len(hs)].ClaimKey(ctx, storage.IdemClaim{Tenant: "t", Key: "k", RequestHash: h, Now: now, LeaseUntil: now.Add(time.Minute)})
			if err != nil {
				t.Error(err)
				return
			}
			if r.State == storage.IdemNew {
				mu.Lock()
				winners++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if winners != 1 {
		t.Fatalf("%d concurrent claims won, want 1", winners)
	}
}

func testReplays(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	job := storage.ReplayJob{ID: storage.NewID("rpl_", now), Tenant: "acme", State: storage.ReplayRunning, CreatedAt: now}
	ok(s.PutReplay(ctx, &job))
	job.Matched, job.State = 3, storage.ReplayCompleted
	ok(s.PutReplay(ctx, &job))
	got := must(s.GetReplay(ctx, job.ID))
	if got.Matched != 3 || got.State != storage.ReplayCompleted {
		t.Fatalf("replay job: %+v", got)
	}
	if running := must(s.ListReplays(ctx, storage.ReplayRunning)); len(running) != 0 {
		t.Fatalf("running: %+v", running)
	}
	// CreateReplay writes a job once: a second creation under the same id
	// (two runs of one admin request) is ErrConflict, and changes nothing.
	fresh := storage.ReplayJob{ID: storage.NewID("rpl_", now), Tenant: "acme", State: storage.ReplayRunning, CreatedAt: now, Matched: 1}
	ok(s.CreateReplay(ctx, &fresh))
	again := fresh
	again.Matched = 0
	if err := s.CreateReplay(ctx, &again); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("second CreateReplay: %v, want ErrConflict", err)
	}
	if got := must(s.GetReplay(ctx, fresh.ID)); got.Matched != 1 {
		t.Fatalf("the second CreateReplay changed the job: %+v", got)
	}
	if err := s.CreateReplay(ctx, &job); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("CreateReplay over a job written by PutReplay: %v, want ErrConflict", err)
	}
}

func testPurge(t *testing.T, o Opener) {
	s, ctx := open(t, o), context.Background()
	now := time.Now().UTC()
	old := Event("acme", "stripe", "old", "b", now.Add(-2*time.Hour), "ep1")
	fresh := Event("acme", "stripe", "fresh", "b", now, "ep1")
	must(s.Ingest(ctx, old))
	must(s.Ingest(ctx, fresh))
	if n := must(s.Purge(ctx, now.Add(-time.Hour), now.Add(-time.Hour), 100)); n != 1 {
		t.Fatalf("purged %d, want 1", n)
	}
	if _, err := s.GetEvent(ctx, old.Event.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("old event still there: %v", err)
	}
	if _, err := s.GetDelivery(ctx, old.Deliveries[0].ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("old delivery still there: %v", err)
	}
	jobs := must(s.Claim(ctx, "ep1", now.Add(-3*time.Hour).Add(4*time.Hour), 10, time.Minute))
	if len(jobs) != 1 || jobs[0].Delivery.ID != fresh.Deliveries[0].ID {
		t.Fatalf("outbox after purge: %+v", jobs)
	}
}

// testPurgeKeepsFreshRetries: a replay or a manual retry of an event close
// to the retention cutoff starts a retry budget that retention must not
// cut short. The event stays until such deliveries finish; deliveries
// whose budget started before the cutoff (an endpoint disabled for the
// whole retention period) do not hold their event.
func testPurgeKeepsFreshRetries(t *testing.T, o Opener) {
	s, ctx := open(t, o), context.Background()
	now := time.Now().UTC()
	then := now.Add(-2 * time.Hour)
	cutoff := now.Add(-time.Hour)
	stale := Event("acme", "stripe", "stale", "b", then, "ep1")
	replayed := Event("acme", "stripe", "replayed", "b", then.Add(time.Second), "ep1")
	retried := Event("acme", "stripe", "retried", "b", then.Add(2*time.Second), "ep2")
	for _, r := range []*storage.IngestRequest{stale, replayed, retried} {
		must(s.Ingest(ctx, r))
	}
	// Replay: a new delivery of the old event, with a budget from now.
	fresh := replayed.Deliveries[0]
	fresh.ID = storage.NewID("dlv_", now)
	fresh.CreatedAt, fresh.NextAttemptAt, fresh.RetryFrom, fresh.UpdatedAt = now, now, now, now
	ok(s.Enqueue(ctx, []storage.Delivery{fresh}))
	// Manual retry of a delivery that had failed.
	jobs := must(s.Claim(ctx, "ep2", then.Add(3*time.Second), 10, time.Minute))
	if len(jobs) != 1 {
		t.Fatalf("claim: %+v", jobs)
	}
	ok(s.Complete(ctx, &storage.Outcome{Delivery: jobs[0].Delivery.ID, Lease: jobs[0].Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: then, StatusCode: 400}, State: storage.StateFailed}))
	must(s.Retry(ctx, jobs[0].Delivery.ID, now))

	if n := must(s.Purge(ctx, cutoff, cutoff, 100)); n != 1 {
		t.Fatalf("purged %d events, want 1 (the one without a fresh retry)", n)
	}
	if _, err := s.GetEvent(ctx, stale.Event.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("stale event kept: %v", err)
	}
	for _, r := range []*storage.IngestRequest{replayed, retried} {
		must(s.GetEvent(ctx, r.Event.ID))
	}
	must(s.GetDelivery(ctx, fresh.ID))
	// Both fresh deliveries are still deliverable, with their event's body
	// (ep1 also has the replayed event's first delivery, still pending).
	want := map[string]bool{fresh.ID: true, jobs[0].Delivery.ID: true}
	for _, ep := range []string{"ep1", "ep2"} {
		for _, j := range must(s.Claim(ctx, ep, now, 10, time.Minute)) {
			if string(j.Event.Body) != "b" {
				t.Fatalf("%s: job without its event: %+v", ep, j)
			}
			delete(want, j.Delivery.ID)
			ok(s.Complete(ctx, &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil, CountAttempt: true,
				Attempt: storage.Attempt{N: 2, At: now, StatusCode: 200}, State: storage.StateSucceeded}))
		}
	}
	if len(want) != 0 {
		t.Fatalf("fresh retries lost to retention: %v", want)
	}
	// Finished: now retention takes them.
	if n := must(s.Purge(ctx, cutoff, cutoff, 100)); n != 2 {
		t.Fatalf("purged %d events after the retries finished, want 2", n)
	}
	for _, r := range []*storage.IngestRequest{replayed, retried} {
		if _, err := s.GetEvent(ctx, r.Event.ID); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("finished event kept: %v", err)
		}
	}
}

// testPurgeKeepsLongRetryWindows: liveCutoff keeps an event whose live
// delivery's budget started before cutoff but after liveCutoff (an
// endpoint that retries for longer than retention); an event whose
// deliveries all finished goes at cutoff all the same.
func testPurgeKeepsLongRetryWindows(t *testing.T, o Opener) {
	s, ctx := open(t, o), context.Background()
	now := time.Now().UTC()
	then := now.Add(-2 * time.Hour)
	cutoff, liveCutoff := now.Add(-time.Hour), now.Add(-3*time.Hour)
	retrying := Event("acme", "stripe", "retrying", "b", then, "ep1")
	done := Event("acme", "stripe", "done", "b", then.Add(time.Second), "ep2")
	older := Event("acme", "stripe", "older", "b", now.Add(-4*time.Hour), "ep3")
	for _, r := range []*storage.IngestRequest{retrying, done, older} {
		must(s.Ingest(ctx, r))
	}
	jobs := must(s.Claim(ctx, "ep2", now, 10, time.Minute))
	if len(jobs) != 1 {
		t.Fatalf("claim: %+v", jobs)
	}
	ok(s.Complete(ctx, &storage.Outcome{Delivery: jobs[0].Delivery.ID, Lease: jobs[0].Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}, State: storage.StateSucceeded}))
	if n := must(s.Purge(ctx, cutoff, liveCutoff, 100)); n != 2 {
		t.Fatalf("purged %d events, want 2 (the finished one, and the one retrying since before liveCutoff)", n)
	}
	must(s.GetEvent(ctx, retrying.Event.ID))
	must(s.GetDelivery(ctx, retrying.Deliveries[0].ID))
	for _, r := range []*storage.IngestRequest{done, older} {
		if _, err := s.GetEvent(ctx, r.Event.ID); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("event %s kept: %v", r.Event.EventID, err)
		}
	}
	// Without the longer window it goes.
	if n := must(s.Purge(ctx, cutoff, cutoff, 100)); n != 1 {
		t.Fatalf("purged %d events with liveCutoff = cutoff, want 1", n)
	}
}

func testClosed(t *testing.T, o Opener) {
	s := o.Open(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Ingest(context.Background(), Event("a", "b", "c", "d", time.Now()))
	if !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("accept on a closed store: %v", err)
	}
	if err := s.Ping(context.Background()); err == nil {
		t.Fatal("ping on a closed store succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}
