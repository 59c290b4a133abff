package storagetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
)

// The promises of storage.Notice: an operational event written in the
// same write as the state change it reports (an outcome, an endpoint's
// change), or not at all.

// notice builds an operational event of tenant with one pending delivery,
// due at now, to each endpoint (of the endpoint's own tenant, which may
// differ from the event's: an operator's alert endpoint).
func notice(tenant, typ string, now time.Time, eps ...storage.Endpoint) storage.Notice {
	id := storage.NewID("evt_", now)
	n := storage.Notice{Event: storage.Event{
		ID: id, Tenant: tenant, Source: storage.NoticeSource, EventID: id, Type: typ,
		ReceivedAt: now, ContentType: "application/json", Body: []byte(`{"type":"` + typ + `"}`),
		IdempotencyKey: storage.IdempotencyKey(tenant, storage.NoticeSource, id),
	}}
	for _, ep := range eps {
		n.Deliveries = append(n.Deliveries, storage.Delivery{
			ID: storage.NewID("dlv_", now), Event: id, Tenant: ep.Tenant, Endpoint: ep.ID,
			IdempotencyKey: n.Event.IdempotencyKey, State: storage.StatePending,
			CreatedAt: now, NextAttemptAt: now, RetryFrom: now, UpdatedAt: now,
		})
	}
	return n
}

// claimOne claims endpoint's due deliveries at at and wants want of them.
func claimOne(t *testing.T, s storage.Store, endpoint string, at time.Time, want int) []storage.Job {
	t.Helper()
	jobs := must(s.Claim(context.Background(), endpoint, at, 10, time.Minute))
	if len(jobs) != want {
		t.Fatalf("claim of %s: %d jobs, want %d", endpoint, len(jobs), want)
	}
	return jobs
}

// finishJob records a job's attempt with state st.
func finishJob(s storage.Store, j storage.Job, st storage.DeliveryState, at time.Time, ns ...storage.Notice) error {
	return s.Complete(context.Background(), &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil,
		CountAttempt: true, Attempt: storage.Attempt{N: j.Delivery.AttemptCount + 1, At: at, StatusCode: 500},
		State: st, Notices: ns})
}

// A failed delivery's outcome stores its notices with it: the events are
// listed in their tenant's stream (one without deliveries as unmatched),
// and their deliveries are claimed like any, an operator's of tenant ""
// among them, which a tenant's listing of deliveries does not show.
func testCompleteStoresNotices(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	must(s.Ingest(ctx, Event("acme", "stripe", "e1", "b", now, "down")))
	sub := storage.Endpoint{ID: "ops", Tenant: "acme"}
	alert := storage.Endpoint{ID: "alert", Tenant: ""}
	failed := notice("acme", "hookgate.delivery.failed", now, sub, alert)
	alone := notice("acme", "hookgate.endpoint.disabled", now)
	j := claimOne(t, s, "down", now, 1)[0]
	ok(finishJob(s, j, storage.StateFailed, now, failed, alone))
	if o.Reopen != nil {
		s = o.Reopen(t, s)
		t.Cleanup(func() { _ = s.Close() })
	}
	got := must(s.GetEvent(ctx, failed.Event.ID))
	if got.Tenant != "acme" || got.Source != storage.NoticeSource || got.Type != failed.Event.Type || string(got.Body) != string(failed.Event.Body) {
		t.Fatalf("notice event stored as %+v", got)
	}
	if ids := listIDs(t, s, storage.EventFilter{Tenant: "acme", Source: storage.NoticeSource}); !slices.Equal(ids, sorted(failed.Event.ID, alone.Event.ID)) {
		t.Fatalf("the tenant's hookgate events: %v", ids)
	}
	if ids := listIDs(t, s, storage.EventFilter{Tenant: "acme", State: storage.EventUnmatched}); !slices.Equal(ids, []string{alone.Event.ID}) {
		t.Fatalf("unmatched: %v, want the notice without deliveries", ids)
	}
	if ids := listIDs(t, s, storage.EventFilter{Tenant: "acme", State: storage.EventPending}); !slices.Equal(ids, []string{failed.Event.ID}) {
		t.Fatalf("pending: %v, want the notice with live deliveries", ids)
	}
	ds, _ := must2(s.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "acme", Event: failed.Event.ID}))
	if len(ds) != 1 || ds[0].Endpoint != "ops" {
		t.Fatalf("the tenant's deliveries of its notice: %+v, want only its own endpoint's", ds)
	}
	ds, _ = must2(s.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "acme", Endpoint: "alert"}))
	if len(ds) != 0 {
		t.Fatalf("the tenant lists the operator's alert deliveries: %+v", ds)
	}
	for _, ep := range []storage.Endpoint{sub, alert} {
		jb := claimOne(t, s, ep.ID, now, 1)[0]
		if jb.Delivery.Tenant != ep.Tenant || jb.Event.ID != failed.Event.ID || string(jb.Event.Body) != string(failed.Event.Body) {
			t.Fatalf("claim of %s: %+v", ep.ID, jb)
		}
		ok(finishJob(s, jb, storage.StateSucceeded, now))
	}
	if ids := listIDs(t, s, storage.EventFilter{Tenant: "acme", State: storage.EventDelivered}); !slices.Equal(ids, []string{failed.Event.ID}) {
		t.Fatalf("delivered: %v, want the notice once both deliveries succeeded", ids)
	}
}

// An outcome refused for a lost lease stores none of its notices.
func testNoticeLostWithLease(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	must(s.Ingest(ctx, Event("acme", "stripe", "e1", "b", now, "down")))
	j := claimOne(t, s, "down", now, 1)[0]
	n := notice("acme", "hookgate.delivery.failed", now, storage.Endpoint{ID: "ops", Tenant: "acme"})
	stale := j
	stale.Delivery.LeaseUntil = j.Delivery.LeaseUntil.Add(-time.Second)
	if err := finishJob(s, stale, storage.StateFailed, now, n); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("outcome under another lease: %v, want ErrLeaseLost", err)
	}
	if _, err := s.GetEvent(ctx, n.Event.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the notice of a refused outcome: %v, want not stored", err)
	}
	claimOne(t, s, "ops", now.Add(time.Hour), 0)
}

// ChangeEndpoint stores the endpoint and the notice fn returns together;
// an error from fn stores neither.
func testChangeEndpointNotice(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	ep := storage.Endpoint{ID: "gone", Tenant: "acme", URL: "https://g.example/h", CreatedAt: now, UpdatedAt: now}
	ok(s.PutEndpoint(ctx, &ep))
	errStop := errors.New("no change")
	refused := notice("acme", "hookgate.endpoint.disabled", now, storage.Endpoint{ID: "ops", Tenant: "acme"})
	if _, err := s.ChangeEndpoint(ctx, "gone", func(ep *storage.Endpoint) (*storage.Notice, error) {
		ep.Disabled = true
		return &refused, errStop
	}); !errors.Is(err, errStop) {
		t.Fatalf("change whose fn failed: %v, want its error", err)
	}
	if _, err := s.GetEvent(ctx, refused.Event.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the notice of an aborted change: %v, want not stored", err)
	}
	n := notice("acme", "hookgate.endpoint.disabled", now, storage.Endpoint{ID: "ops", Tenant: "acme"})
	got := must(s.ChangeEndpoint(ctx, "gone", func(ep *storage.Endpoint) (*storage.Notice, error) {
		ep.Disabled, ep.DisabledReason = true, "gone"
		return &n, nil
	}))
	if !got.Disabled || !must(s.GetEndpoint(ctx, "gone")).Disabled {
		t.Fatalf("ChangeEndpoint returned %+v, want disabled and stored", got)
	}
	if ev := must(s.GetEvent(ctx, n.Event.ID)); ev.Type != n.Event.Type {
		t.Fatalf("notice stored as %+v", ev)
	}
	claimOne(t, s, "ops", now, 1)
	must(s.ChangeEndpoint(ctx, "gone", func(ep *storage.Endpoint) (*storage.Notice, error) {
		ep.Disabled = false
		return nil, nil
	}))
	if _, err := s.ChangeEndpoint(ctx, "nope", func(*storage.Endpoint) (*storage.Notice, error) { return nil, nil }); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("change of a missing endpoint: %v", err)
	}
}

// A store that keeps the circuit stores an outcome's CircuitOpened only
// when that outcome opens a closed circuit, and CircuitClosed only when it
// closes an open one: a failed probe that opens it again, a failure below
// the threshold, a success of a closed circuit store neither.
func testGatedCircuitNotices(t *testing.T, o Opener) {
	s, a, b := gated(t, o)
	ctx, now := context.Background(), time.Now().UTC()
	queue(t, s, storage.Endpoint{ID: "ep", URL: "https://n.example/hook"}, 6, now)
	var stored, dropped []string
	count := func(j storage.Job, success bool, at time.Time, wantOpened, wantClosed bool) {
		t.Helper()
		opened := notice("acme", "hookgate.endpoint.disabled", at)
		closed := notice("acme", "hookgate.endpoint.recovered", at, storage.Endpoint{ID: "ops", Tenant: "acme"})
		out := &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil, CountAttempt: true, Circuit: true,
			Attempt: storage.Attempt{N: j.Delivery.AttemptCount + 1, At: at, StatusCode: 500}, State: storage.StateFailed,
			CircuitOpened: &opened, CircuitClosed: &closed}
		if success {
			out.Attempt.StatusCode, out.State = 200, storage.StateSucceeded
		}
		ok(s.Complete(ctx, out))
		for _, c := range []struct {
			n    *storage.Notice
			want bool
		}{{&opened, wantOpened}, {&closed, wantClosed}} {
			_, err := s.GetEvent(ctx, c.n.Event.ID)
			switch {
			case c.want && err != nil:
				t.Fatalf("%s of outcome %d: %v, want stored", c.n.Event.Type, len(stored)+len(dropped), err)
			case !c.want && !errors.Is(err, storage.ErrNotFound):
				t.Fatalf("%s of outcome %d: %v, want not stored", c.n.Event.Type, len(stored)+len(dropped), err)
			case c.want:
				stored = append(stored, c.n.Event.ID)
			default:
				dropped = append(dropped, c.n.Event.ID)
			}
		}
	}
	j := take(a, "ep", now, 3)
	if len(j) != 3 {
		t.Fatalf("claim of a closed circuit took %d, want 3", len(j))
	}
	count(j[0], true, now, false, false)  // closed, no failures
	count(j[1], false, now, false, false) // one failure: below the threshold
	count(j[2], false, now, true, false)  // the second: opens
	half := now.Add(time.Second)
	probe := take(b, "ep", half, 10)
	if len(probe) != 1 {
		t.Fatalf("after the cool-down the claim took %d, want one probe", len(probe))
	}
	count(probe[0], false, half, false, false) // a failed probe: open again, no new notice
	again := half.Add(2 * time.Second)
	probe = take(a, "ep", again, 10)
	if len(probe) != 1 {
		t.Fatalf("after the second cool-down the claim took %d, want one probe", len(probe))
	}
	count(probe[0], true, again, false, true) // the probe's success: closed
	claimOne(t, s, "ops", again, 1)
	rest := take(b, "ep", again, 10)
	if len(rest) != 1 {
		t.Fatalf("after the circuit closed the claim took %d, want the last one", len(rest))
	}
	count(rest[0], true, again, false, false) // closed already
	if len(stored) != 2 {
		t.Fatalf("stored notices %v, want one opened and one closed", stored)
	}
}

// Outcomes written at once (an engine may commit them in one group) each
// store their own notices.
func testConcurrentNotices(t *testing.T, o Opener) {
	s, ctx, now := open(t, o), context.Background(), time.Now().UTC()
	const n = 24
	for i := range n {
		must(s.Ingest(ctx, Event("acme", "stripe", fmt.Sprint("e", i), "b", now, "down")))
	}
	jobs := claimOne(t, s, "down", now, 10)
	jobs = append(jobs, claimOne(t, s, "down", now, 10)...)
	jobs = append(jobs, claimOne(t, s, "down", now, n-20)...)
	ns := make([]storage.Notice, n)
	var wg sync.WaitGroup
	for i, j := range jobs {
		ns[i] = notice("acme", "hookgate.delivery.failed", now, storage.Endpoint{ID: "ops", Tenant: "acme"})
		wg.Go(func() {
			if err := finishJob(s, j, storage.StateFailed, now, ns[i]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, nc := range ns {
		if _, err := s.GetEvent(ctx, nc.Event.ID); err != nil {
			t.Fatalf("notice %s: %v", nc.Event.ID, err)
		}
	}
	got := 0
	for range 3 {
		got += len(must(s.Claim(ctx, "ops", now, 10, time.Minute)))
	}
	if got != n {
		t.Fatalf("the notices' subscriber claimed %d deliveries, want %d", got, n)
	}
}
