package outbound

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/internal/pgtest"
	"hookgate/internal/testsupport"
	"hookgate/storage"
	"hookgate/storage/postgres"
)

// notices is every stored operational event of tenant ("" = every
// tenant's), newest first.
func notices(t *testing.T, s storage.Inspector, tenant string) []storage.Event {
	t.Helper()
	evs, _, err := s.ListEvents(context.Background(), storage.EventFilter{Tenant: tenant, Source: storage.NoticeSource, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// payloads decodes the operational events rc received, each checked to be
// signed with ep's secret (Standard Webhooks) and to carry only the
// fields of NoticePayload.
func payloads(t *testing.T, rc *receiver, ep storage.Endpoint) []NoticePayload {
	t.Helper()
	var out []NoticePayload
	for _, r := range rc.all() {
		if !verifySW(ep.Secrets[0].Value, r.header, r.body) {
			t.Fatalf("a notice to %s does not verify with its secret: %s", ep.ID, r.body)
		}
		var p NoticePayload
		dec := json.NewDecoder(bytes.NewReader(r.body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("notice body %s: %v", r.body, err)
		}
		out = append(out, p)
	}
	return out
}

// ofType counts the payloads of type typ.
func ofType(ps []NoticePayload, typ string) (n int) {
	for _, p := range ps {
		if p.Type == typ {
			n++
		}
	}
	return n
}

// subscribed makes an endpoint ask for operational events.
func subscribed(globs ...string) func(*storage.Endpoint) {
	return func(ep *storage.Endpoint) { ep.EventTypes = globs }
}

// ofTenant moves an endpoint to another tenant.
func ofTenant(tenant string) func(*storage.Endpoint) {
	return func(ep *storage.Endpoint) { ep.Tenant = tenant }
}

// acceptFor stores one event of tenant with a delivery, due now, to each
// endpoint, as accept does for "acme", on any store.
func acceptFor(t *testing.T, s storage.Ingester, tenant string, eps ...storage.Endpoint) []storage.Delivery {
	t.Helper()
	now := time.Now().UTC()
	id := storage.NewID("evt_", now)
	key := storage.IdempotencyKey(tenant, "stripe", id)
	ev := storage.Event{ID: id, Tenant: tenant, Source: "stripe", EventID: id, Type: "invoice.paid",
		ReceivedAt: now, ContentType: "application/json", Body: []byte(`{"id":"x"}`), IdempotencyKey: key}
	var ds []storage.Delivery
	for _, ep := range eps {
		ds = append(ds, storage.Delivery{ID: storage.NewID("dlv_", now), Event: id, Tenant: tenant, Endpoint: ep.ID,
			IdempotencyKey: key, State: storage.StatePending, CreatedAt: now, NextAttemptAt: now, RetryFrom: now, UpdatedAt: now})
	}
	_, err := s.Ingest(context.Background(), &storage.IngestRequest{
		Key: storage.DedupeKey{Tenant: tenant, Source: "stripe", EventID: id}, BodyHash: sha256.Sum256(ev.Body),
		DedupeUntil: now.Add(time.Hour), Event: ev, Deliveries: ds, Response: storage.Response{Status: 202},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// settle lets every loop of d pass a few times, so that what was due has
// been sent: a test then checks that nothing more came.
func settle(t *testing.T, d *Dispatcher, eps ...storage.Endpoint) {
	t.Helper()
	for _, ep := range eps {
		waitForPasses(t, d, ep.ID, 5)
	}
}

// A 410 Gone disables the endpoint and raises exactly one
// hookgate.endpoint.disabled (and the delivery's hookgate.delivery.failed),
// stored in the tenant's stream and sent, signed, to the tenant's
// endpoint that subscribes: not to the disabled one, not to those that
// did not ask by name, not to another tenant's.
func TestGoneRaisesEndpointDisabled(t *testing.T) {
	db, _ := openDB(t)
	gone := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusGone) })
	ops, quiet, star, theirs := newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil)
	goneEp := testEndpoint(t, db, "gone", gone.URL, subscribed("hookgate.*", "invoice.*"))
	opsEp := testEndpoint(t, db, "ops", ops.URL, subscribed("hookgate.endpoint.*", "hookgate.delivery.failed"))
	quietEp := testEndpoint(t, db, "quiet", quiet.URL)
	starEp := testEndpoint(t, db, "star", star.URL, subscribed("*"))
	theirEp := testEndpoint(t, db, "theirs", theirs.URL, subscribed("hookgate.*"), ofTenant("beta"))
	dl := accept(t, db, event{}, goneEp)[0]
	d := startDispatcher(t, db, Config{}, goneEp, opsEp, quietEp, starEp, theirEp)
	d.Notify(goneEp.ID)

	testsupport.WaitFor(t, wait, "the two notices at ops", func() bool { return ops.count() >= 2 })
	settle(t, d, goneEp, opsEp, quietEp, starEp, theirEp)
	ps := payloads(t, ops, opsEp)
	if len(ps) != 2 || ofType(ps, NoticeEndpointDisabled) != 1 || ofType(ps, NoticeDeliveryFailed) != 1 {
		t.Fatalf("ops received %+v; want one endpoint.disabled and one delivery.failed", ps)
	}
	for _, p := range ps {
		if p.Tenant != "acme" || p.Endpoint != "gone" || p.Reason != ReasonGone || p.LastStatus != http.StatusGone {
			t.Fatalf("notice %+v; want about acme's gone, reason gone, last_status 410", p)
		}
		if p.Type == NoticeEndpointDisabled && (p.DisabledAt == "" || p.Until != "") {
			t.Fatalf("endpoint.disabled %+v; want disabled_at and no until (disabled until enabled)", p)
		}
		if p.Type == NoticeDeliveryFailed && (p.Delivery != dl.ID || p.Event != dl.Event || p.Attempts != 1) {
			t.Fatalf("delivery.failed %+v; want delivery %s of event %s after 1 attempt", p, dl.ID, dl.Event)
		}
	}
	if gone.count() != 1 || quiet.count()+star.count()+theirs.count() != 0 {
		t.Fatalf("requests: gone %d, quiet %d, star %d, theirs %d; want only gone's first", gone.count(), quiet.count(), star.count(), theirs.count())
	}
	if n := len(notices(t, db, "acme")); n != 2 {
		t.Fatalf("%d operational events stored for acme, want 2", n)
	}
	if n := len(notices(t, db, "beta")); n != 0 {
		t.Fatalf("%d operational events stored for beta, want none", n)
	}
}

// A delivery whose attempts run out raises one hookgate.delivery.failed,
// with what a user needs to find and replay it.
func TestExhaustedAttemptsRaiseDeliveryFailed(t *testing.T) {
	db, _ := openDB(t)
	down := newReceiver(t, status(http.StatusInternalServerError, 1<<30))
	ops := newReceiver(t, nil)
	// It asks for notices itself, but never gets one about itself.
	downEp := testEndpoint(t, db, "down", down.URL, subscribed("hookgate.*"), func(ep *storage.Endpoint) { ep.Retry.MaxAttempts = 3 })
	opsEp := testEndpoint(t, db, "ops", ops.URL, subscribed("hookgate.delivery.failed"))
	dl := accept(t, db, event{}, downEp)[0]
	d := startDispatcher(t, db, Config{CircuitFailures: 100}, downEp, opsEp)
	d.Notify(downEp.ID)

	testsupport.WaitFor(t, wait, "the delivery to fail", inState(t, db, dl.ID, storage.StateFailed))
	testsupport.WaitFor(t, wait, "the notice", func() bool { return ops.count() >= 1 })
	settle(t, d, downEp, opsEp)
	ps := payloads(t, ops, opsEp)
	if len(ps) != 1 {
		t.Fatalf("ops received %d notices, want 1", len(ps))
	}
	p := ps[0]
	want := NoticePayload{Type: NoticeDeliveryFailed, Tenant: "acme", Endpoint: "down", Delivery: dl.ID, Event: dl.Event,
		EventType: "invoice.paid", Source: "stripe", Reason: ReasonAttemptsExhausted, Attempts: 3, LastStatus: 500,
		LastError: p.LastError, CreatedAt: dl.CreatedAt.Format(time.RFC3339Nano), FailedAt: p.FailedAt}
	if p != want || p.LastError == "" || p.FailedAt == "" {
		t.Fatalf("notice %+v\nwant %+v, with last_error and failed_at", p, want)
	}
	if _, err := time.Parse(time.RFC3339Nano, p.FailedAt); err != nil {
		t.Fatalf("failed_at %q: %v", p.FailedAt, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(ops.request(0).body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"consecutive_failures", "until", "disabled_at", "recovered_at"} {
		if _, ok := raw[k]; ok {
			t.Fatalf("delivery.failed carries %q: %v", k, raw)
		}
	}
	evs := notices(t, db, "acme")
	if len(evs) != 1 || evs[0].Type != NoticeDeliveryFailed || evs[0].IdempotencyKey != storage.IdempotencyKey("acme", "hookgate", evs[0].EventID) {
		t.Fatalf("stored notices %+v, want the one delivery.failed", evs)
	}
	if down.count() != 3 {
		t.Fatalf("the failing endpoint got %d requests, want its 3 attempts and no notice about itself", down.count())
	}
	if got := delivery(t, db, dl.ID); got.AttemptCount != 3 {
		t.Fatalf("the failed delivery has %d attempts, want 3", got.AttemptCount)
	}
}

// Notices go to the endpoints of their tenant that ask for them by name
// and to the alert endpoint, which gets every tenant's under its own
// tenant "", and never about itself; a failed delivery of a notice raises
// none (no loop).
func TestNoticeRecipients(t *testing.T) {
	db, _ := openDB(t)
	failing := func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusInternalServerError) }
	aDown, bDown := newReceiver(t, failing), newReceiver(t, failing)
	alert := newReceiver(t, failing) // fails too: no notice about it
	aOps := newReceiver(t, failing)  // fails too: no notice about a notice
	bOps, aNone, aStar, aOther, aOff := newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil)
	once := func(ep *storage.Endpoint) { ep.Retry.MaxAttempts = 1 }
	eps := []storage.Endpoint{
		testEndpoint(t, db, "a-down", aDown.URL, once),
		testEndpoint(t, db, "b-down", bDown.URL, once, ofTenant("beta")),
		testEndpoint(t, db, "alert", alert.URL, once, ofTenant("")),
		testEndpoint(t, db, "a-ops", aOps.URL, once, subscribed("hookgate.delivery.*")),
		testEndpoint(t, db, "b-ops", bOps.URL, subscribed("hookgate.*"), ofTenant("beta")),
		testEndpoint(t, db, "a-none", aNone.URL),
		testEndpoint(t, db, "a-star", aStar.URL, subscribed("*")),
		testEndpoint(t, db, "a-other", aOther.URL, subscribed("hookgate.endpoint.*")),
		testEndpoint(t, db, "a-off", aOff.URL, subscribed("hookgate.*"), func(ep *storage.Endpoint) { ep.Disabled = true }),
	}
	alertEp, aOpsEp, bOpsEp := eps[2], eps[3], eps[4]
	a := acceptFor(t, db, "acme", eps[0])[0]
	b := acceptFor(t, db, "beta", eps[1])[0]
	d := startDispatcher(t, db, Config{AlertEndpoint: "alert", CircuitFailures: 100}, eps...)
	d.Notify()

	testsupport.WaitFor(t, wait, "the notices", func() bool { return alert.count() >= 2 && aOps.count() >= 1 && bOps.count() >= 1 })
	// Every notice's delivery ends (failed, for the failing receivers).
	testsupport.WaitFor(t, wait, "the notices' deliveries to end", func() bool {
		for _, ev := range notices(t, db, "") {
			ds, _, err := db.ListDeliveries(context.Background(), storage.DeliveryFilter{Event: ev.ID})
			if err != nil {
				t.Fatal(err)
			}
			for _, dl := range ds {
				if !dl.State.Terminal() {
					return false
				}
			}
		}
		return true
	})
	settle(t, d, eps...)
	tenants := func(ps []NoticePayload) (out []string) {
		for _, p := range ps {
			if p.Type != NoticeDeliveryFailed {
				t.Fatalf("notice %+v, want only delivery.failed", p)
			}
			out = append(out, p.Tenant+"/"+p.Endpoint)
		}
		slices.Sort(out)
		return out
	}
	if got := tenants(payloads(t, alert, alertEp)); !slices.Equal(got, []string{"acme/a-down", "beta/b-down"}) {
		t.Fatalf("the alert endpoint received %v, want every tenant's one", got)
	}
	if got := tenants(payloads(t, aOps, aOpsEp)); !slices.Equal(got, []string{"acme/a-down"}) {
		t.Fatalf("acme's subscriber received %v, want acme's only", got)
	}
	if got := tenants(payloads(t, bOps, bOpsEp)); !slices.Equal(got, []string{"beta/b-down"}) {
		t.Fatalf("beta's subscriber received %v, want beta's only", got)
	}
	if n := aNone.count() + aStar.count() + aOther.count() + aOff.count(); n != 0 {
		t.Fatalf("%d notices to endpoints that did not ask by name (or are disabled)", n)
	}
	if evs := notices(t, db, ""); len(evs) != 2 {
		t.Fatalf("%d operational events stored, want the two delivery.failed (none about the alert endpoint or a notice)", len(evs))
	}
	// The alert endpoint's deliveries are its tenant's, not the events'.
	ds, _, err := db.ListDeliveries(context.Background(), storage.DeliveryFilter{Endpoint: "alert"})
	if err != nil || len(ds) != 2 {
		t.Fatalf("the alert endpoint's deliveries: %+v (%v)", ds, err)
	}
	for _, dl := range ds {
		if dl.Tenant != "" || dl.State != storage.StateFailed || dl.AttemptCount != 1 {
			t.Fatalf("alert delivery %+v; want tenant \"\", sent once and failed", dl)
		}
	}
	mine, _, err := db.ListDeliveries(context.Background(), storage.DeliveryFilter{Tenant: "acme", Endpoint: "alert"})
	if err != nil || len(mine) != 0 {
		t.Fatalf("acme lists the operator's alert deliveries: %+v (%v)", mine, err)
	}
	for _, dl := range []storage.Delivery{a, b} {
		if got := delivery(t, db, dl.ID); got.State != storage.StateFailed {
			t.Fatalf("delivery %s: %s, want failed", dl.ID, got.State)
		}
	}
}

// The circuit opening raises one hookgate.endpoint.disabled (reason
// circuit, with its cool-down's end), a failed probe none, and the
// circuit closing one hookgate.endpoint.recovered.
func TestCircuitNotices(t *testing.T) {
	db, _ := openDB(t)
	runCircuitNotices(t, db, Config{})
}

// So on a store that keeps the circuit (Gates): it stores the prebuilt
// notices only on the circuit's transitions.
func TestCircuitNoticesGated(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	db, err := postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	runCircuitNotices(t, db, Config{Gates: db})
}

// circuitStore is what runCircuitNotices needs of a store.
type circuitStore interface {
	Store
	storage.Ingester
	storage.Inspector
	PutEndpoint(ctx context.Context, ep *storage.Endpoint) error
}

// runCircuitNotices fails an endpoint's attempts until its circuit opens
// and two probes failed, then lets it recover.
func runCircuitNotices(t *testing.T, db circuitStore, cfg Config) {
	var healthy atomic.Bool
	var probes atomic.Int64
	flaky := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if !healthy.Load() {
			if n > 3 {
				probes.Add(1)
			}
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	ops := newReceiver(t, nil)
	put := func(id, url string, mod ...func(*storage.Endpoint)) storage.Endpoint {
		now := time.Now().UTC()
		ep := storage.Endpoint{ID: id, Tenant: "acme", URL: url, Secrets: []storage.Secret{{Value: NewSecret()}},
			Timeout: 2 * time.Second, MaxInFlight: 1, Retry: fastRetry, CreatedAt: now, UpdatedAt: now}
		for _, m := range mod {
			m(&ep)
		}
		if err := db.PutEndpoint(context.Background(), &ep); err != nil {
			t.Fatal(err)
		}
		return ep
	}
	flakyEp := put("flaky", flaky.URL)
	opsEp := put("ops", ops.URL, subscribed("hookgate.endpoint.*"))
	var ds []storage.Delivery
	for range 4 {
		ds = append(ds, acceptFor(t, db, "acme", flakyEp)...)
	}
	cfg.CircuitFailures, cfg.CircuitCooldown, cfg.CircuitMaxCooldown = 3, 100*time.Millisecond, 200*time.Millisecond
	d := startDispatcher(t, db, cfg, flakyEp, opsEp)
	d.Notify()

	testsupport.WaitFor(t, wait, "endpoint.disabled", func() bool { return ops.count() >= 1 })
	testsupport.WaitFor(t, wait, "two failed probes", func() bool { return probes.Load() >= 2 })
	healthy.Store(true)
	for _, dl := range ds {
		testsupport.WaitFor(t, wait, "recovery", func() bool {
			got, err := db.GetDelivery(context.Background(), dl.ID)
			return err == nil && got.State == storage.StateSucceeded
		})
	}
	testsupport.WaitFor(t, wait, "endpoint.recovered", func() bool { return ops.count() >= 2 })
	settle(t, d, flakyEp, opsEp)
	ps := payloads(t, ops, opsEp)
	if len(ps) != 2 || ps[0].Type != NoticeEndpointDisabled || ps[1].Type != NoticeEndpointRecovered {
		t.Fatalf("ops received %+v; want one endpoint.disabled, then one endpoint.recovered", ps)
	}
	off, on := ps[0], ps[1]
	if off.Reason != ReasonCircuit || off.ConsecutiveFailures != 3 || off.LastStatus != 500 || off.DisabledAt == "" || off.Until == "" || off.Endpoint != "flaky" {
		t.Fatalf("endpoint.disabled %+v; want reason circuit after 3 failures, with disabled_at and until", off)
	}
	at, _ := time.Parse(time.RFC3339Nano, off.DisabledAt)
	until, _ := time.Parse(time.RFC3339Nano, off.Until)
	if until.Sub(at) != 100*time.Millisecond {
		t.Fatalf("until %s is %s after disabled_at %s, want the 100ms cool-down", off.Until, until.Sub(at), off.DisabledAt)
	}
	if on.Reason != ReasonCircuit || on.RecoveredAt == "" || on.Endpoint != "flaky" {
		t.Fatalf("endpoint.recovered %+v", on)
	}
	if n := len(notices(t, db, "acme")); n != 2 {
		t.Fatalf("%d operational events stored, want 2", n)
	}
}

// A delivery failed unsent while its endpoint was paused (max_elapsed
// passed) raises hookgate.delivery.failed with reason expired.
func TestPausedExpiryRaisesDeliveryFailed(t *testing.T) {
	db, _ := openDB(t)
	ops := newReceiver(t, nil)
	opsEp := testEndpoint(t, db, "ops", ops.URL, subscribed("hookgate.delivery.failed"))
	d, _, ids, clock, start := pausedDeadEndpoint(t, db, db, Config{})
	d.UpsertEndpoint(opsEp)
	clock.set(start.Add(2 * time.Hour))
	passTwice(t, d, "dead")
	for _, id := range ids {
		testsupport.WaitFor(t, wait, id+" failed", inState(t, db, id, storage.StateFailed))
	}
	testsupport.WaitFor(t, wait, "the six notices", func() bool { d.Notify(opsEp.ID); return ops.count() >= 6 })
	settle(t, d, opsEp)
	ps := payloads(t, ops, opsEp)
	var got []string
	for _, p := range ps {
		if p.Type != NoticeDeliveryFailed || p.Reason != ReasonExpired || p.Endpoint != "dead" || p.LastStatus != 0 || p.Attempts < 1 || p.LastError == "" {
			t.Fatalf("notice %+v; want delivery.failed of dead, reason expired", p)
		}
		got = append(got, p.Delivery)
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(ids)); !slices.Equal(got, want) {
		t.Fatalf("notices of deliveries %v, want one for each of %v", got, want)
	}
	types := map[string]int{}
	for _, ev := range notices(t, db, "acme") {
		types[ev.Type]++
	}
	// The circuit's opening was stored too, with no subscriber for it.
	if types[NoticeDeliveryFailed] != 6 || types[NoticeEndpointDisabled] != 1 || len(types) != 2 {
		t.Fatalf("stored notices by type %v, want 6 delivery.failed and 1 endpoint.disabled", types)
	}
}

// EndpointNotice builds an operator's notice for the admin API, which
// stores it with its change (ChangeEndpoint) and wakes its recipients.
func TestEndpointNoticeOfAnOperator(t *testing.T) {
	db, _ := openDB(t)
	ops, alert := newReceiver(t, nil), newReceiver(t, nil)
	target := testEndpoint(t, db, "target", newReceiver(t, nil).URL)
	opsEp := testEndpoint(t, db, "ops", ops.URL, subscribed("hookgate.endpoint.disabled"))
	alertEp := testEndpoint(t, db, "alert", alert.URL, ofTenant(""))
	d := startDispatcher(t, db, Config{AlertEndpoint: "alert"}, target, opsEp, alertEp)

	if got := noticeTime(time.Date(2030, 1, 2, 3, 4, 5, 600_000_000, time.FixedZone("CET", 3600))); got != "2030-01-02T02:04:05.6Z" {
		t.Fatalf("a notice's time reads %q, want RFC 3339 in UTC, trailing zeros trimmed", got)
	}
	now := time.Now()
	if n := d.EndpointNotice(alertEp, NoticeEndpointDisabled, ReasonOperator, now); n != nil {
		t.Fatalf("a notice about the alert endpoint: %+v", n)
	}
	n := d.EndpointNotice(target, NoticeEndpointDisabled, ReasonOperator, now)
	if n == nil || n.Event.Tenant != "acme" || n.Event.Source != "hookgate" || n.Event.Type != NoticeEndpointDisabled ||
		n.Event.EventID == "" || n.Event.IdempotencyKey != storage.IdempotencyKey("acme", "hookgate", n.Event.EventID) || len(n.Deliveries) != 2 {
		t.Fatalf("operator's notice %+v", n)
	}
	if _, err := db.ChangeEndpoint(context.Background(), "target", func(ep *storage.Endpoint) (*storage.Notice, error) {
		ep.Disabled = true
		return n, nil
	}); err != nil {
		t.Fatal(err)
	}
	d.NotifyNotice(n)
	testsupport.WaitFor(t, wait, "the notice at ops and alert", func() bool { return ops.count() == 1 && alert.count() == 1 })
	p := payloads(t, ops, opsEp)[0]
	want := NoticePayload{Type: NoticeEndpointDisabled, Tenant: "acme", Endpoint: "target", Reason: ReasonOperator, DisabledAt: now.UTC().Format(time.RFC3339Nano)}
	if p != want {
		t.Fatalf("payload %+v, want %+v", p, want)
	}
	if q := payloads(t, alert, alertEp)[0]; q != want {
		t.Fatalf("alert payload %+v, want %+v", q, want)
	}
	on := d.EndpointNotice(target, NoticeEndpointRecovered, ReasonOperator, now)
	if len(on.Deliveries) != 1 || on.Deliveries[0].Endpoint != "alert" || on.Deliveries[0].Tenant != "" {
		t.Fatalf("recovered notice's deliveries %+v, want only the alert endpoint's (ops asks for disabled only)", on.Deliveries)
	}
}

// An alert endpoint misconfigured as a tenant's gets that tenant's
// notices only: never another tenant's event.
func TestAlertEndpointOfATenantGetsItsTenantsOnly(t *testing.T) {
	db, _ := openDB(t)
	alert := testEndpoint(t, db, "alert", "https://alert.example/h")
	beta := testEndpoint(t, db, "b", "https://b.example/h", ofTenant("beta"))
	acme := testEndpoint(t, db, "a", "https://a.example/h")
	d, err := New(Config{Store: db, AlertEndpoint: "alert", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	d.SetEndpoints([]storage.Endpoint{alert, beta, acme})
	now := time.Now()
	if n := d.EndpointNotice(beta, NoticeEndpointDisabled, ReasonOperator, now); len(n.Deliveries) != 0 {
		t.Fatalf("beta's notice goes to %+v, want nowhere", n.Deliveries)
	}
	if n := d.EndpointNotice(acme, NoticeEndpointDisabled, ReasonOperator, now); len(n.Deliveries) != 1 || n.Deliveries[0].Tenant != "acme" {
		t.Fatalf("acme's notice goes to %+v, want its alert endpoint, as acme's", n.Deliveries)
	}
}
