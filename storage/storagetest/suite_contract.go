package storagetest

// Promises of package storage that the gateway, inbound and outbound
// packages rely on, beyond suite.go and suite_edges.go.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
)

// Complete with State cancelled: the dispatcher cancels, unsent, a
// delivery whose endpoint id now names another tenant's endpoint
// (outbound/loop.go, cancelForeign), though Outcome's doc names only
// pending, succeeded and failed. The delivery must end cancelled, out of
// the outbox, with its attempt recorded, and a manual retry refused.
func testCompleteCancelled(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	must(s.Ingest(ctx, Event("acme", "stripe", "fc", "b", now, "ep")))
	j := must(s.Claim(ctx, "ep", now, 10, time.Minute))[0]
	ok(s.Complete(ctx, &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil,
		Attempt: storage.Attempt{N: 1, At: now, Error: "not sent"}, State: storage.StateCancelled}))
	d := must(s.GetDelivery(ctx, j.Delivery.ID))
	atts := must(s.ListAttempts(ctx, j.Delivery.ID))
	if d.State != storage.StateCancelled || d.AttemptCount != 0 || len(atts) != 1 || atts[0].Error != "not sent" {
		t.Fatalf("after a cancelling outcome: %+v attempts %+v", d, atts)
	}
	if jobs := must(s.Claim(ctx, "ep", now.Add(2*time.Hour), 10, time.Minute)); len(jobs) != 0 {
		t.Fatalf("a cancelled delivery was claimed again: %+v", jobs)
	}
	if ids := must(s.QueuedEndpoints(ctx)); len(ids) != 0 {
		t.Fatalf("queued endpoints after the cancel: %v", ids)
	}
	if live, due := must2(s.Depth(ctx, "ep", now.Add(2*time.Hour), 10)); live != 0 || due != 0 {
		t.Fatalf("depth after the cancel: %d live %d due", live, due)
	}
	if _, err := s.Retry(ctx, j.Delivery.ID, now.Add(time.Hour)); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("retry of a delivery cancelled by its outcome: %v, want ErrConflict", err)
	}
}

// Claim takes the oldest due first, counting a claim whose lease ran out
// as due at its lease's end, and nothing due later; the claim's lease is
// now+lease, and a dead worker's attempt is not counted.
func testClaimOldestDueFirst(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "order", "b", now.Add(-2*time.Minute), "ep")
	req.Deliveries[0].NextAttemptAt = now.Add(-70 * time.Second)
	must(s.Ingest(ctx, req))
	dead := must(s.Claim(ctx, "ep", now.Add(-62500*time.Millisecond), 10, time.Minute)) // its lease ends at now-2.5s
	if len(dead) != 1 {
		t.Fatalf("claim: %+v", dead)
	}
	mk := func(due time.Duration) storage.Delivery {
		d := req.Deliveries[0]
		d.ID, d.NextAttemptAt = storage.NewID("dlv_", now), now.Add(due)
		return d
	}
	a, b, c, later := mk(-time.Second), mk(-3*time.Second), mk(-2*time.Second), mk(time.Second)
	ok(s.Enqueue(ctx, []storage.Delivery{a, b, c, later}))
	want := []string{b.ID, dead[0].Delivery.ID, c.ID, a.ID}
	for i, id := range want {
		jobs := must(s.Claim(ctx, "ep", now, 1, 30*time.Second))
		if len(jobs) != 1 || jobs[0].Delivery.ID != id {
			t.Fatalf("claim %d took %+v, want %s (oldest due first)", i, jobs, id)
		}
		if d := jobs[0].Delivery; !d.LeaseUntil.Equal(now.Add(30*time.Second)) || d.State != storage.StateDelivering || d.AttemptCount != 0 {
			t.Fatalf("claimed delivery %d: %+v", i, d)
		}
	}
	if jobs := must(s.Claim(ctx, "ep", now, 10, 30*time.Second)); len(jobs) != 0 {
		t.Fatalf("claimed what is due later: %+v", jobs)
	}
}

// A listing's cursor is a position, not a record: a bulk replay stores it
// in its job (ReplayJob.Cursor) and goes on from it after a restart, while
// retention may have deleted the event it names. It must still list
// exactly the rest, neither ErrBadCursor nor from the start.
func testCursorSurvivesPurgeAndRestart(t *testing.T, o Opener) {
	s, ctx, now := o.Open(t), context.Background(), time.Now().UTC()
	t.Cleanup(func() { _ = s.Close() })
	old := now.Add(-2 * time.Hour).Truncate(time.Millisecond) // ids keep whole milliseconds
	var ids []string
	for i := range 6 {
		var req *storage.IngestRequest
		if i < 4 {
			// Kept by retention: a live delivery with a fresh retry budget.
			req = Event("acme", "stripe", fmt.Sprint("c", i), "b", old.Add(time.Duration(i)*time.Second), "ep")
			req.Deliveries[0].RetryFrom = now
		} else {
			req = Event("acme", "stripe", fmt.Sprint("c", i), "b", old.Add(time.Duration(i)*time.Second))
		}
		must(s.Ingest(ctx, req))
		ids = append(ids, req.Event.ID)
	}
	cursors := map[string]string{}
	for _, tenant := range []string{"acme", ""} {
		first, cursor := must2(s.ListEvents(ctx, storage.EventFilter{Tenant: tenant, Limit: 2}))
		if len(first) != 2 || first[0].ID != ids[5] || first[1].ID != ids[4] || cursor == "" {
			t.Fatalf("first page (tenant %q): %d events, cursor %q", tenant, len(first), cursor)
		}
		cursors[tenant] = cursor
	}
	// Retention deletes the event the cursors name; the older ones are
	// kept by their fresh deliveries.
	if n := must(s.Purge(ctx, old.Add(5*time.Second), old.Add(5*time.Second), 100)); n != 1 {
		t.Fatalf("purged %d, want 1", n)
	}
	if o.Reopen != nil {
		s = o.Reopen(t, s)
		t.Cleanup(func() { _ = s.Close() })
	}
	want := fmt.Sprint([]string{ids[3], ids[2], ids[1], ids[0]})
	for tenant, cursor := range cursors {
		var got []string
		for range 10 {
			page, next, err := s.ListEvents(ctx, storage.EventFilter{Tenant: tenant, Limit: 2, Cursor: cursor})
			if err != nil {
				t.Fatalf("page after a cursor whose event was purged (tenant %q): %v", tenant, err)
			}
			for _, e := range page {
				got = append(got, e.ID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		if fmt.Sprint(got) != want {
			t.Fatalf("after the cursor (tenant %q): %v, want %v", tenant, got, want)
		}
	}
}

// Release moves only claimed deliveries: one that finished, or was
// cancelled by its endpoint's delete, stays as it is. The dispatcher
// releases the claims a shutdown cut (outbound/loop.go, release) and
// ingest those of an Ingest that failed (inbound/receive.go,
// releaseClaimed), whatever happened to them meanwhile.
func testReleaseLeavesFinishedAndCancelled(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	must(s.Ingest(ctx, Event("acme", "stripe", "rel", "b", now, "ep", "ep")))
	jobs := must(s.Claim(ctx, "ep", now, 10, time.Minute))
	if len(jobs) != 2 {
		t.Fatalf("claim: %+v", jobs)
	}
	done, gone := jobs[0].Delivery, jobs[1].Delivery
	ok(s.Complete(ctx, &storage.Outcome{Delivery: done.ID, Lease: done.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}, State: storage.StateSucceeded}))
	if n := must(s.CancelEndpoint(ctx, "ep")); n != 1 {
		t.Fatalf("cancelled %d, want 1", n)
	}
	ok(s.Release(ctx, []string{done.ID, gone.ID}, done.LeaseUntil, now))
	if d := must(s.GetDelivery(ctx, done.ID)); d.State != storage.StateSucceeded {
		t.Fatalf("a finished delivery after a release: %+v", d)
	}
	if d := must(s.GetDelivery(ctx, gone.ID)); d.State != storage.StateCancelled {
		t.Fatalf("a cancelled delivery after a release: %+v", d)
	}
	if again := must(s.Claim(ctx, "ep", now.Add(time.Hour), 10, time.Minute)); len(again) != 0 {
		t.Fatalf("claimable after the release: %+v", again)
	}
	if ids := must(s.QueuedEndpoints(ctx)); len(ids) != 0 {
		t.Fatalf("queued endpoints after the release: %v", ids)
	}
}

// IdemInProgress carries the holder's lease (the admin API's Retry-After
// is computed from it); a zero Remember remembers a use until its
// LeaseUntil: a retry after it begins a new use, one after AbandonKey but
// within the lease continues it.
func testIdempotencyLeaseAndZeroRemember(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	h1, h2 := sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))
	claim := func(h [32]byte, at time.Time) storage.IdemResult {
		return must(s.ClaimKey(ctx, storage.IdemClaim{Tenant: "acme", Key: "z", RequestHash: h, Now: at, LeaseUntil: at.Add(30 * time.Second)}))
	}
	first := claim(h1, now)
	if first.State != storage.IdemNew || !first.LeaseUntil.Equal(now.Add(30*time.Second)) || !first.Since.Equal(now) {
		t.Fatalf("first claim: %+v", first)
	}
	if r := claim(h1, now.Add(10*time.Second)); r.State != storage.IdemInProgress || !r.LeaseUntil.Equal(first.LeaseUntil) {
		t.Fatalf("while it runs: %+v, want in progress until %v", r, first.LeaseUntil)
	}
	at := now.Add(31 * time.Second)
	second := claim(h1, at)
	if second.State != storage.IdemNew || !second.Since.Equal(at) {
		t.Fatalf("after the lease, Remember zero: %+v, want a new use since %v", second, at)
	}
	ok(s.AbandonKey(ctx, "acme", "z", second.LeaseUntil))
	if r := claim(h1, now.Add(40*time.Second)); r.State != storage.IdemNew || !r.Since.Equal(at) {
		t.Fatalf("after AbandonKey, within the lease: %+v, want since %v", r, at)
	}
	if r := claim(h2, now.Add(41*time.Second)); r.State != storage.IdemMismatch {
		t.Fatalf("another request while it runs: %+v", r)
	}
}

// Every method answers ErrClosed once the store is closed ("returned by
// every method"); the suite checked Ingest alone.
func testClosedStoreRefusesEverything(t *testing.T, o Opener) {
	s, ctx, now := o.Open(t), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "cl", "b", now, "ep")
	must(s.Ingest(ctx, req))
	ok(s.PutReplay(ctx, &storage.ReplayJob{ID: storage.NewID("rpl_", now), State: storage.ReplayRunning}))
	ok(s.Close())
	d := req.Deliveries[0]
	calls := map[string]func() error{
		"Claim":          func() error { _, err := s.Claim(ctx, "ep", now, 10, time.Minute); return err },
		"NextDue":        func() error { _, _, err := s.NextDue(ctx, "ep"); return err },
		"Complete":       func() error { return s.Complete(ctx, &storage.Outcome{Delivery: d.ID, State: storage.StateSucceeded}) },
		"Release":        func() error { return s.Release(ctx, []string{d.ID}, now, now) },
		"Enqueue":        func() error { return s.Enqueue(ctx, []storage.Delivery{d}) },
		"Retry":          func() error { _, err := s.Retry(ctx, d.ID, now); return err },
		"CancelEndpoint": func() error { _, err := s.CancelEndpoint(ctx, "ep"); return err },
		"QueuedEndpoints": func() error {
			_, err := s.QueuedEndpoints(ctx)
			return err
		},
		"Depth":       func() error { _, _, err := s.Depth(ctx, "ep", now, 10); return err },
		"PutEndpoint": func() error { return s.PutEndpoint(ctx, &storage.Endpoint{ID: "e"}) },
		"UpdateEndpoint": func() error {
			_, err := s.UpdateEndpoint(ctx, "e", func(*storage.Endpoint) error { return nil })
			return err
		},
		"GetEndpoint":    func() error { _, err := s.GetEndpoint(ctx, "e"); return err },
		"ListEndpoints":  func() error { _, err := s.ListEndpoints(ctx); return err },
		"DeleteEndpoint": func() error { return s.DeleteEndpoint(ctx, "e") },
		"PutSource":      func() error { return s.PutSource(ctx, &storage.Source{ID: "s"}) },
		"GetSource":      func() error { _, err := s.GetSource(ctx, "s"); return err },
		"ListSources":    func() error { _, err := s.ListSources(ctx); return err },
		"DeleteSource":   func() error { return s.DeleteSource(ctx, "s") },
		"GetEvent":       func() error { _, err := s.GetEvent(ctx, req.Event.ID); return err },
		"ListEvents":     func() error { _, _, err := s.ListEvents(ctx, storage.EventFilter{Tenant: "acme"}); return err },
		"GetDelivery":    func() error { _, err := s.GetDelivery(ctx, d.ID); return err },
		"ListDeliveries": func() error {
			_, _, err := s.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "acme", Event: req.Event.ID})
			return err
		},
		"ListAttempts": func() error { _, err := s.ListAttempts(ctx, d.ID); return err },
		"ClaimKey": func() error {
			_, err := s.ClaimKey(ctx, storage.IdemClaim{Tenant: "t", Key: "k", Now: now, LeaseUntil: now.Add(time.Minute)})
			return err
		},
		"FinishKey": func() error {
			return s.FinishKey(ctx, "t", "k", now, storage.Response{Status: 201}, now.Add(time.Hour))
		},
		"AbandonKey":    func() error { return s.AbandonKey(ctx, "t", "k", now) },
		"PutReplay":     func() error { return s.PutReplay(ctx, &storage.ReplayJob{ID: "rpl_x"}) },
		"CreateReplay":  func() error { return s.CreateReplay(ctx, &storage.ReplayJob{ID: "rpl_y"}) },
		"EnqueueReplay": func() error { return s.EnqueueReplay(ctx, &storage.ReplayJob{ID: "rpl_x"}, nil) },
		"GetReplay":     func() error { _, err := s.GetReplay(ctx, "rpl_x"); return err },
		"ListReplays":   func() error { _, err := s.ListReplays(ctx, ""); return err },
		"Purge":         func() error { _, err := s.Purge(ctx, now.Add(time.Hour), now.Add(time.Hour), 10); return err },
		"Ingest":        func() error { _, err := s.Ingest(ctx, Event("acme", "stripe", "cl", "b", now)); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, storage.ErrClosed) {
			t.Errorf("%s on a closed store: %v, want ErrClosed", name, err)
		}
	}
}

// Retry "whatever its state": a pending delivery due later is due now,
// with one outbox entry (claimed once, not twice); a succeeded one is
// due again, its attempts kept, a new budget from its attempt count.
func testRetryOfPendingAndSucceeded(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	req := Event("acme", "stripe", "rt", "b", now, "ep")
	req.Deliveries[0].NextAttemptAt = now.Add(time.Hour)
	req.Deliveries[0].Interval = time.Minute
	must(s.Ingest(ctx, req))
	id := req.Deliveries[0].ID
	r := must(s.Retry(ctx, id, now))
	if r.State != storage.StatePending || !r.NextAttemptAt.Equal(now) || !r.RetryFrom.Equal(now) || r.RetryBase != 0 || r.Interval != 0 {
		t.Fatalf("retry of a pending delivery: %+v", r)
	}
	if live, due := must2(s.Depth(ctx, "ep", now, 10)); live != 1 || due != 1 {
		t.Fatalf("depth after a retry of a pending delivery: %d live %d due, want 1 and 1", live, due)
	}
	jobs := must(s.Claim(ctx, "ep", now, 10, time.Minute))
	if len(jobs) != 1 {
		t.Fatalf("claim after the retry: %d jobs, want 1", len(jobs))
	}
	ok(s.Complete(ctx, &storage.Outcome{Delivery: id, Lease: jobs[0].Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}, State: storage.StateSucceeded}))
	if more := must(s.Claim(ctx, "ep", now.Add(2*time.Hour), 10, time.Minute)); len(more) != 0 {
		t.Fatalf("the pending entry the retry replaced was claimed: %+v", more)
	}
	later := now.Add(time.Second)
	r = must(s.Retry(ctx, id, later))
	if r.State != storage.StatePending || r.AttemptCount != 1 || r.RetryBase != 1 || !r.NextAttemptAt.Equal(later) {
		t.Fatalf("retry of a succeeded delivery: %+v", r)
	}
	if jobs := must(s.Claim(ctx, "ep", later, 10, time.Minute)); len(jobs) != 1 || jobs[0].Delivery.ID != id {
		t.Fatalf("claim after retrying a succeeded delivery: %+v", jobs)
	}
	if atts := must(s.ListAttempts(ctx, id)); len(atts) != 1 {
		t.Fatalf("attempts after the retry: %+v", atts)
	}
}

// The tenant filters are the admin API's only guard for listings: a
// tenant token's GET /deliveries?event= of another tenant's event, or
// with a state, and its event listing given a cursor made by another
// listing, show nothing of the other tenant.
func testTenantFilters(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	mine := Event("acme", "stripe", "t1", "b", now.Add(-2*time.Second), "a1")
	theirs := Event("other", "stripe", "t1", "b", now.Add(-time.Second), "o1")
	newest := Event("other", "stripe", "t2", "b", now, "o1")
	for _, r := range []*storage.IngestRequest{mine, theirs, newest} {
		must(s.Ingest(ctx, r))
	}
	for name, c := range map[string]struct {
		f    storage.DeliveryFilter
		want int
	}{
		"their event":       {storage.DeliveryFilter{Tenant: "acme", Event: theirs.Event.ID}, 0},
		"their event, own":  {storage.DeliveryFilter{Tenant: "other", Event: theirs.Event.ID}, 1},
		"state":             {storage.DeliveryFilter{Tenant: "acme", State: storage.StatePending}, 1},
		"since":             {storage.DeliveryFilter{Tenant: "acme", Since: now.Add(-time.Hour)}, 1},
		"their endpoint":    {storage.DeliveryFilter{Tenant: "acme", Endpoint: "o1", Until: now}, 0},
		"their event+state": {storage.DeliveryFilter{Tenant: "acme", Event: newest.Event.ID, State: storage.StatePending}, 0},
	} {
		ds, _ := must2(s.ListDeliveries(ctx, c.f))
		for _, d := range ds {
			if d.Tenant != c.f.Tenant {
				t.Errorf("%s: listed a delivery of tenant %s", name, d.Tenant)
			}
		}
		if len(ds) != c.want {
			t.Errorf("%s: %d deliveries, want %d", name, len(ds), c.want)
		}
	}
	evs, _ := must2(s.ListEvents(ctx, storage.EventFilter{Tenant: "acme", Source: "stripe"}))
	if len(evs) != 1 || evs[0].ID != mine.Event.ID {
		t.Fatalf("acme's events of source stripe: %+v", evs)
	}
	// The provider's event ID t1 is both tenants': each sees its own, an
	// operator both, newest first; an unknown one matches nothing.
	for name, c := range map[string]struct {
		f    storage.EventFilter
		want []string
	}{
		"acme's t1":     {storage.EventFilter{Tenant: "acme", EventID: "t1"}, []string{mine.Event.ID}},
		"other's t1":    {storage.EventFilter{Tenant: "other", EventID: "t1"}, []string{theirs.Event.ID}},
		"every t1":      {storage.EventFilter{EventID: "t1"}, []string{theirs.Event.ID, mine.Event.ID}},
		"t2 and source": {storage.EventFilter{Source: "stripe", EventID: "t2"}, []string{newest.Event.ID}},
		"unknown":       {storage.EventFilter{EventID: "t3"}, nil},
	} {
		evs, _ := must2(s.ListEvents(ctx, c.f))
		var got []string
		for _, ev := range evs {
			got = append(got, ev.ID)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("event ID filter %s: %v, want %v", name, got, c.want)
		}
	}
	// A cursor made by an operator's listing, at the other tenant's event.
	page, cursor := must2(s.ListEvents(ctx, storage.EventFilter{Limit: 1}))
	if len(page) != 1 || page[0].ID != newest.Event.ID || cursor == "" {
		t.Fatalf("operator's first page: %+v %q", page, cursor)
	}
	evs, _ = must2(s.ListEvents(ctx, storage.EventFilter{Tenant: "acme", Cursor: cursor}))
	if len(evs) != 1 || evs[0].ID != mine.Event.ID {
		t.Fatalf("acme's events after another listing's cursor: %+v", evs)
	}
}

// Enqueue (a replay of an old event) racing Purge (retention): either the
// replay fails with ErrNotFound and nothing of it is stored, or it is
// stored and its event stays, kept by the new delivery's fresh budget.
// Never a delivery whose event is gone: its claims would skip it for ever.
// The admin API answers 410 on ErrNotFound and 202 otherwise.
func testEnqueueRacesPurge(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	hs := handles(t, o, s)
	purger := hs[len(hs)-1] // another gateway's, when there is one
	old := now.Add(-2 * time.Hour)
	cutoff := now.Add(-time.Hour)
	var stored []string
	for i := range 30 {
		req := Event("acme", "stripe", fmt.Sprint("race", i), "b", old.Add(time.Duration(i)*time.Millisecond), "old")
		must(s.Ingest(ctx, req))
		fresh := req.Deliveries[0]
		fresh.ID, fresh.Endpoint = storage.NewID("dlv_", now), "fresh"
		fresh.CreatedAt, fresh.NextAttemptAt, fresh.RetryFrom, fresh.UpdatedAt = now, now, now, now
		var wg sync.WaitGroup
		var enqErr, purgeErr error
		wg.Go(func() { enqErr = s.Enqueue(ctx, []storage.Delivery{fresh}) })
		wg.Go(func() { _, purgeErr = purger.Purge(ctx, cutoff, cutoff, 100) })
		wg.Wait()
		ok(purgeErr)
		switch {
		case enqErr == nil:
			if _, err := s.GetEvent(ctx, req.Event.ID); err != nil {
				t.Fatalf("round %d: the replay was stored but its event is gone: %v", i, err)
			}
			stored = append(stored, fresh.ID)
		case errors.Is(enqErr, storage.ErrNotFound):
			if _, err := s.GetDelivery(ctx, fresh.ID); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("round %d: a replay refused with ErrNotFound left its delivery: %v", i, err)
			}
		default:
			t.Fatalf("round %d: enqueue: %v", i, enqErr)
		}
	}
	ok(func() error { _, err := s.Purge(ctx, cutoff, cutoff, 100); return err }())
	got := map[string]bool{}
	for _, j := range must(s.Claim(ctx, "fresh", now, 100, time.Minute)) {
		if string(j.Event.Body) != "b" {
			t.Fatalf("a claimed replay without its event: %+v", j)
		}
		got[j.Delivery.ID] = true
	}
	for _, id := range stored {
		if !got[id] {
			t.Fatalf("a stored replay was not claimable with its event: %s", id)
		}
	}
}

// Purge deletes events, not their dedupe records: a provider's resend
// inside dedupe.ttl of an event retention has deleted is still answered
// with the first answer (SPEC 3), not stored as a second event.
func testPurgeKeepsDedupeRecords(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	first := Event("acme", "stripe", "pd", "b", now.Add(-2*time.Hour), "ep")
	first.DedupeUntil = now.Add(time.Hour)
	must(s.Ingest(ctx, first))
	if n := must(s.Purge(ctx, now.Add(-time.Hour), now.Add(-time.Hour), 100)); n != 1 {
		t.Fatalf("purged %d, want 1", n)
	}
	resend := Event("acme", "stripe", "pd", "b", now, "ep")
	if r := must(s.Ingest(ctx, resend)); !r.Replayed || string(r.Response.Body) != string(first.Response.Body) {
		t.Fatalf("resend after the event was purged: %+v, want the first answer", r)
	}
	if _, err := s.Ingest(ctx, Event("acme", "stripe", "pd", "other", now)); !errors.Is(err, storage.ErrIdempotencyMismatch) {
		t.Fatalf("other body after the event was purged: %v, want ErrIdempotencyMismatch", err)
	}
	if evs, _ := must2(s.ListEvents(ctx, storage.EventFilter{})); len(evs) != 0 {
		t.Fatalf("events after the resends: %d, want 0", len(evs))
	}
}

// Errors and empty answers the gateway branches on for what does not
// exist: GetReplay ErrNotFound (a replay job's run ends, the admin API
// answers 404); CancelEndpoint of an endpoint without deliveries 0 and
// nil (an endpoint delete finishes); Enqueue of nothing nil (a replay of
// an event nobody subscribes to, 202); attempts and deliveries of what
// does not exist empty; FinishKey and AbandonKey of a key never claimed
// ErrLeaseLost.
func testMissingRecords(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	if _, err := s.GetReplay(ctx, storage.NewID("rpl_", now)); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("GetReplay of a missing job: %v, want ErrNotFound", err)
	}
	if n, err := s.CancelEndpoint(ctx, "never"); n != 0 || err != nil {
		t.Errorf("CancelEndpoint without deliveries: %d %v, want 0 and nil", n, err)
	}
	if err := s.Enqueue(ctx, nil); err != nil {
		t.Errorf("Enqueue of nothing: %v", err)
	}
	if atts, err := s.ListAttempts(ctx, storage.NewID("dlv_", now)); len(atts) != 0 || err != nil {
		t.Errorf("attempts of a missing delivery: %+v %v", atts, err)
	}
	for _, tenant := range []string{"", "acme"} {
		if ds, next, err := s.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: tenant, Event: storage.NewID("evt_", now)}); len(ds) != 0 || next != "" || err != nil {
			t.Errorf("deliveries of a missing event (tenant %q): %+v %q %v", tenant, ds, next, err)
		}
	}
	if _, found, err := s.NextDue(ctx, "never"); found || err != nil {
		t.Errorf("NextDue of an endpoint without deliveries: %v %v", found, err)
	}
	if live, due, err := s.Depth(ctx, "never", now, 10); live != 0 || due != 0 || err != nil {
		t.Errorf("Depth of an endpoint without deliveries: %d %d %v", live, due, err)
	}
	if err := s.FinishKey(ctx, "acme", "never", now, storage.Response{Status: 201}, now.Add(time.Hour)); !errors.Is(err, storage.ErrLeaseLost) {
		t.Errorf("FinishKey of a key never claimed: %v, want ErrLeaseLost", err)
	}
	if err := s.AbandonKey(ctx, "acme", "never", now); !errors.Is(err, storage.ErrLeaseLost) {
		t.Errorf("AbandonKey of a key never claimed: %v, want ErrLeaseLost", err)
	}
}

// DedupeUntil is when the dedupe record expires, whatever it is: dedupe.ttl is only checked to be positive, so an
// operator may write a TTL of centuries (up to Go's 2562047h) to mean
// "never forget". Badger encodes the record's expiry as int64 Unix
// nanoseconds, which overflow after 2262: the expiry came back in the
// 18th century, the record counted as expired, and every resend of the
// event was stored again as a new event with new deliveries.
func testFarFutureDedupeWindow(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	first := Event("acme", "stripe", "forever", "b", now, "ep")
	first.DedupeUntil = now.Add(2_500_000 * time.Hour) // ~285 years
	must(s.Ingest(ctx, first))
	r, err := s.Ingest(ctx, Event("acme", "stripe", "forever", "b", now.Add(time.Second), "ep"))
	if err != nil || !r.Replayed || string(r.Response.Body) != string(first.Response.Body) {
		t.Fatalf("resend a second later, inside a dedupe window until %v: replayed %v, answer %s, err %v; want the first answer %s",
			first.DedupeUntil.Format(time.DateOnly), r.Replayed, r.Response.Body, err, first.Response.Body)
	}
}

// PurgeReplays deletes the finished replay jobs last updated before the
// cutoff, and keeps running ones however old, and recent finished ones.
func testPurgeReplays(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	old, fresh := now.Add(-2*time.Hour), now.Add(-time.Minute)
	jobs := map[string]storage.ReplayJob{
		"old-completed":   {State: storage.ReplayCompleted, UpdatedAt: old},
		"old-failed":      {State: storage.ReplayFailed, UpdatedAt: old},
		"old-running":     {State: storage.ReplayRunning, UpdatedAt: old},
		"fresh-completed": {State: storage.ReplayCompleted, UpdatedAt: fresh},
	}
	for name, j := range jobs {
		j.ID, j.Tenant, j.CreatedAt = storage.DerivedID("rpl_", name), "acme", old
		ok(s.PutReplay(ctx, &j))
		jobs[name] = j
	}
	if n := must(s.PurgeReplays(ctx, now.Add(-time.Hour))); n != 2 {
		t.Fatalf("PurgeReplays deleted %d jobs, want the 2 old finished ones", n)
	}
	for name, j := range jobs {
		_, err := s.GetReplay(ctx, j.ID)
		wantGone := name == "old-completed" || name == "old-failed"
		if gone := errors.Is(err, storage.ErrNotFound); gone != wantGone {
			t.Errorf("%s after PurgeReplays: %v", name, err)
		}
	}
	if n := must(s.PurgeReplays(ctx, now.Add(-time.Hour))); n != 0 {
		t.Fatalf("a second PurgeReplays deleted %d", n)
	}
}

// A delivery claimed by one gateway is not claimed by another until its
// lease ends; then the other takes it over, with the same
// Idempotency-Key, and the first one's late outcome is refused. With one
// handle it is the same promise for one process's workers.
func testLeaseTakenOverByAPeer(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	hs := handles(t, o, s)
	a, b := hs[0], hs[len(hs)-1]
	req := Event("acme", "stripe", "lease", "b", now, "ep")
	must(a.Ingest(ctx, req))
	first := must(a.Claim(ctx, "ep", now, 10, time.Minute))
	if len(first) != 1 {
		t.Fatalf("first claim took %d deliveries, want 1", len(first))
	}
	if again := must(b.Claim(ctx, "ep", now.Add(30*time.Second), 10, time.Minute)); len(again) != 0 {
		t.Fatalf("a delivery under a live lease was claimed again: %+v", again)
	}
	later := now.Add(2 * time.Minute)
	taken := must(b.Claim(ctx, "ep", later, 10, time.Minute))
	if len(taken) != 1 || taken[0].Delivery.ID != first[0].Delivery.ID {
		t.Fatalf("after the lease ended the claim took %+v, want the delivery again", taken)
	}
	if taken[0].Delivery.IdempotencyKey != req.Event.IdempotencyKey || string(taken[0].Event.Body) != "b" {
		t.Fatalf("the taken-over delivery carries key %q and body %q, want %q and the event's body",
			taken[0].Delivery.IdempotencyKey, taken[0].Event.Body, req.Event.IdempotencyKey)
	}
	late := &storage.Outcome{Delivery: first[0].Delivery.ID, Lease: first[0].Delivery.LeaseUntil, State: storage.StateSucceeded,
		CountAttempt: true, Attempt: storage.Attempt{N: 1, At: later, StatusCode: 200}}
	if err := a.Complete(ctx, late); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("the first claimer's outcome after its lease was taken over: %v, want ErrLeaseLost", err)
	}
	ok(b.Complete(ctx, &storage.Outcome{Delivery: taken[0].Delivery.ID, Lease: taken[0].Delivery.LeaseUntil,
		State: storage.StateSucceeded, CountAttempt: true, Attempt: storage.Attempt{N: 1, At: later, StatusCode: 200}}))
	if d := must(a.GetDelivery(ctx, first[0].Delivery.ID)); d.State != storage.StateSucceeded || d.AttemptCount != 1 {
		t.Fatalf("after the peer's outcome: state %s, %d attempts; want succeeded after 1", d.State, d.AttemptCount)
	}
}

// What a provider sends is kept byte for byte: an event ID, a type and
// header values that are not UTF-8 or hold NUL, and a binary body, read
// back as written and deduplicated on the exact ID.
func testOutsideBytesKeptExactly(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	id := "\xff\xfe bad utf-8 \x00 nul"
	req := Event("acme", "stripe", id, "\x00\x01\xff body", now, "ep")
	req.Event.Type = "type.\xc3\x28\x00"
	req.Event.ContentType = "application/octet-stream"
	req.Event.Headers = map[string]string{"X-Raw": "\xff\x00value", "X-Empty": ""}
	must(s.Ingest(ctx, req))
	got := must(s.GetEvent(ctx, req.Event.ID))
	if got.EventID != id || got.Type != req.Event.Type || string(got.Body) != string(req.Event.Body) ||
		len(got.Headers) != 2 || got.Headers["X-Raw"] != "\xff\x00value" || got.Headers["X-Empty"] != "" {
		t.Fatalf("read back %+q, want the bytes written %+q", got, req.Event)
	}
	if !got.ReceivedAt.Equal(now) {
		t.Fatalf("received_at read back as %v, want %v to the nanosecond", got.ReceivedAt, now)
	}
	r := must(s.Ingest(ctx, Event("acme", "stripe", id, "\x00\x01\xff body", now, "ep")))
	if !r.Replayed {
		t.Fatalf("a resend of the same binary event ID was not replayed: %+v", r)
	}
	if r := must(s.Ingest(ctx, Event("acme", "stripe", "\xff\xfe bad utf-8 \x00 nu", "b", now, "ep"))); r.Replayed {
		t.Fatalf("another event ID (one byte shorter) was replayed as the first: %+v", r)
	}
}
