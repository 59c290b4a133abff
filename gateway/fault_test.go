package gateway

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
	"hookgate/internal/tmpfs"
	"hookgate/storage"
)

// Store faults: the real Badger store wrapped so that its writes fail on
// command (asynq's testbroker pattern), and a real full disk (a small
// tmpfs). What a user relies on: an ingest is answered 202 only once the
// event and all its deliveries are durable, otherwise 503 with Retry-After
// and nothing half-written; /readyz says when the store cannot write; and
// everything recovers by itself when the fault clears.

// faultMode is how a faulty store operation behaves.
type faultMode int

const (
	// faultNone: the operation goes through.
	faultNone faultMode = iota
	// faultBefore: the operation fails without touching the store (a
	// full disk, a closed store).
	faultBefore
	// faultAfter: the operation is written, then reported failed (an
	// ambiguous failure: a timeout after the write, a lost answer).
	faultAfter
)

// storeWrites are the store operations that write; a full disk fails
// every one of them.
var storeWrites = []string{
	"Ingest", "Claim", "Complete", "Release", "Enqueue", "EnqueueReplay", "Retry", "CancelEndpoint",
	"PutEndpoint", "UpdateEndpoint", "ChangeEndpoint", "DeleteEndpoint", "PutSource", "DeleteSource",
	"ClaimKey", "FinishKey", "AbandonKey", "PutReplay", "CreateReplay", "Purge", "Ping",
}

// errInjected is the injected failure; no answer may show its text.
var errInjected = errors.New("injected store fault: no space left on device")

// faultyStore is the real store with operations failing on command.
type faultyStore struct {
	storage.Store
	mu     sync.Mutex
	modes  map[string]faultMode
	failed map[string]int // injected failures per operation
}

func newFaultyStore(s storage.Store) *faultyStore {
	return &faultyStore{Store: s, modes: map[string]faultMode{}, failed: map[string]int{}}
}

// set puts ops in mode (faultNone clears them).
func (f *faultyStore) set(mode faultMode, ops ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range ops {
		f.modes[op] = mode
	}
}

// failures is how many calls of op were failed so far.
func (f *faultyStore) failures(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed[op]
}

// run applies op's mode around write.
func (f *faultyStore) run(op string, write func() error) error {
	f.mu.Lock()
	mode := f.modes[op]
	if mode != faultNone {
		f.failed[op]++
	}
	f.mu.Unlock()
	switch mode {
	case faultBefore:
		return errInjected
	case faultAfter:
		if err := write(); err != nil {
			return err
		}
		return errInjected
	}
	return write()
}

func (f *faultyStore) Ingest(ctx context.Context, r *storage.IngestRequest) (res storage.IngestResult, err error) {
	err = f.run("Ingest", func() (e error) { res, e = f.Store.Ingest(ctx, r); return e })
	if err != nil {
		return storage.IngestResult{}, err
	}
	return res, nil
}

func (f *faultyStore) Claim(ctx context.Context, ep string, now time.Time, limit int, lease time.Duration) (jobs []storage.Job, err error) {
	err = f.run("Claim", func() (e error) { jobs, e = f.Store.Claim(ctx, ep, now, limit, lease); return e })
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

func (f *faultyStore) Complete(ctx context.Context, out *storage.Outcome) error {
	return f.run("Complete", func() error { return f.Store.Complete(ctx, out) })
}

func (f *faultyStore) Release(ctx context.Context, ids []string, lease, due time.Time) error {
	return f.run("Release", func() error { return f.Store.Release(ctx, ids, lease, due) })
}

func (f *faultyStore) Enqueue(ctx context.Context, ds []storage.Delivery) error {
	return f.run("Enqueue", func() error { return f.Store.Enqueue(ctx, ds) })
}

func (f *faultyStore) EnqueueReplay(ctx context.Context, job *storage.ReplayJob, ds []storage.Delivery) error {
	return f.run("EnqueueReplay", func() error { return f.Store.EnqueueReplay(ctx, job, ds) })
}

func (f *faultyStore) Retry(ctx context.Context, id string, now time.Time) (d storage.Delivery, err error) {
	err = f.run("Retry", func() (e error) { d, e = f.Store.Retry(ctx, id, now); return e })
	return d, err
}

func (f *faultyStore) CancelEndpoint(ctx context.Context, ep string) (n int, err error) {
	err = f.run("CancelEndpoint", func() (e error) { n, e = f.Store.CancelEndpoint(ctx, ep); return e })
	return n, err
}

func (f *faultyStore) PutEndpoint(ctx context.Context, ep *storage.Endpoint) error {
	return f.run("PutEndpoint", func() error { return f.Store.PutEndpoint(ctx, ep) })
}

func (f *faultyStore) UpdateEndpoint(ctx context.Context, id string, fn func(*storage.Endpoint) error) (ep storage.Endpoint, err error) {
	err = f.run("UpdateEndpoint", func() (e error) { ep, e = f.Store.UpdateEndpoint(ctx, id, fn); return e })
	return ep, err
}

func (f *faultyStore) ChangeEndpoint(ctx context.Context, id string, fn func(*storage.Endpoint) (*storage.Notice, error)) (ep storage.Endpoint, err error) {
	err = f.run("ChangeEndpoint", func() (e error) { ep, e = f.Store.ChangeEndpoint(ctx, id, fn); return e })
	return ep, err
}

func (f *faultyStore) DeleteEndpoint(ctx context.Context, id string) error {
	return f.run("DeleteEndpoint", func() error { return f.Store.DeleteEndpoint(ctx, id) })
}

func (f *faultyStore) PutSource(ctx context.Context, src *storage.Source) error {
	return f.run("PutSource", func() error { return f.Store.PutSource(ctx, src) })
}

func (f *faultyStore) DeleteSource(ctx context.Context, id string) error {
	return f.run("DeleteSource", func() error { return f.Store.DeleteSource(ctx, id) })
}

func (f *faultyStore) ClaimKey(ctx context.Context, c storage.IdemClaim) (r storage.IdemResult, err error) {
	err = f.run("ClaimKey", func() (e error) { r, e = f.Store.ClaimKey(ctx, c); return e })
	return r, err
}

func (f *faultyStore) FinishKey(ctx context.Context, tenant, key string, lease time.Time, resp storage.Response, exp time.Time) error {
	return f.run("FinishKey", func() error { return f.Store.FinishKey(ctx, tenant, key, lease, resp, exp) })
}

func (f *faultyStore) AbandonKey(ctx context.Context, tenant, key string, lease time.Time) error {
	return f.run("AbandonKey", func() error { return f.Store.AbandonKey(ctx, tenant, key, lease) })
}

func (f *faultyStore) PutReplay(ctx context.Context, job *storage.ReplayJob) error {
	return f.run("PutReplay", func() error { return f.Store.PutReplay(ctx, job) })
}

func (f *faultyStore) CreateReplay(ctx context.Context, job *storage.ReplayJob) error {
	return f.run("CreateReplay", func() error { return f.Store.CreateReplay(ctx, job) })
}

func (f *faultyStore) Purge(ctx context.Context, cutoff, liveCutoff time.Time, limit int) (n int, err error) {
	err = f.run("Purge", func() (e error) { n, e = f.Store.Purge(ctx, cutoff, liveCutoff, limit); return e })
	return n, err
}

func (f *faultyStore) Ping(ctx context.Context) error {
	return f.run("Ping", func() error { return f.Store.Ping(ctx) })
}

// startFaulty starts a gateway on testConfig (with extra) over a faulty
// store.
func startFaulty(t *testing.T, extra string) (*gw, *faultyStore) {
	t.Helper()
	var fs *faultyStore
	g := startGateway(t, gwOptions{extra: extra, wrapStore: func(s storage.Store) storage.Store {
		fs = newFaultyStore(s)
		return fs
	}})
	return g, fs
}

// want503 checks a "could not persist" answer: 503, Retry-After, a
// problem+json that does not show the store's error.
func want503(t *testing.T, what string, st int, hdr http.Header, body []byte) {
	t.Helper()
	if st != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("%s: %d Retry-After=%q %s; want 503 with Retry-After", what, st, hdr.Get("Retry-After"), body)
	}
	if p := decodeProblem(t, hdr, body); p.Status != 503 || strings.Contains(string(body), "injected") || strings.Contains(string(body), "no space") {
		t.Fatalf("%s: problem %s", what, body)
	}
}

// readyz returns the status of GET /readyz.
func (h *gw) readyz() int {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+h.AdminAddr()+"/readyz", nil)
	st, _, _ := do(h.t, req)
	return st
}

// eventsIn lists every event in the store (under the fault wrapper).
func eventsIn(t *testing.T, s storage.Store) []storage.Event {
	t.Helper()
	evs, _, err := s.ListEvents(context.Background(), storage.EventFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// deliveriesOf lists the deliveries of one event in the store.
func deliveriesOf(t *testing.T, s storage.Store, event string) []storage.Delivery {
	t.Helper()
	ds, _, err := s.ListDeliveries(context.Background(), storage.DeliveryFilter{Event: event, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// checkWhole asserts that the store holds exactly the events with these
// provider IDs, each with one delivery per endpoint: nothing half-written.
func checkWhole(t *testing.T, s storage.Store, endpoints int, eventIDs ...string) {
	t.Helper()
	evs := eventsIn(t, s)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.EventID)
		if ds := deliveriesOf(t, s, ev.ID); len(ds) != endpoints {
			t.Fatalf("event %s (%s) has %d deliveries, want %d", ev.ID, ev.EventID, len(ds), endpoints)
		}
	}
	all, _, err := s.ListDeliveries(context.Background(), storage.DeliveryFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(eventIDs) || len(all) != endpoints*len(eventIDs) {
		t.Fatalf("store holds events %v and %d deliveries; want exactly %v with %d each", got, len(all), eventIDs, endpoints)
	}
	for _, id := range eventIDs {
		if !strings.Contains(strings.Join(got, "\n")+"\n", id+"\n") {
			t.Fatalf("store holds events %v; want %v", got, eventIDs)
		}
	}
}

// TestFaultStoreDown: every write of the store fails (a full or read-only
// disk). Ingest, publish and endpoint creation answer 503 with
// Retry-After, /readyz is 503 while /healthz stays 200, and nothing is
// written. When the fault clears, the very same requests succeed as first
// requests (no dedupe record or idempotency claim was left behind), and
// their deliveries flow.
func TestFaultStoreDown(t *testing.T) {
	rcv := newReceiver(t)
	g, fs := startFaulty(t, fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q}\n", rcv.url("ep")))
	if st := g.readyz(); st != 200 {
		t.Fatalf("readyz before the fault: %d", st)
	}
	fs.set(faultBefore, storeWrites...)

	body := []byte(`{"id":"down-1","type":"invoice.paid"}`)
	st, hdr, b := g.post("open", body, nil)
	want503(t, "ingest", st, hdr, b)
	publish := jsonMap{"source": "open", "type": "t", "event_id": "down-2", "payload": jsonMap{"n": 1}}
	st, hdr, b = g.api("POST", "/events", opToken, publish)
	want503(t, "publish", st, hdr, b)
	newEP := jsonMap{"id": "late", "tenant": "acme", "url": rcv.url("late")}
	st, hdr, b = g.api("POST", "/endpoints", opToken, newEP, "Idempotency-Key", "create-late")
	want503(t, "create endpoint with a key", st, hdr, b)
	st, hdr, b = g.api("POST", "/endpoints", opToken, newEP)
	want503(t, "create endpoint", st, hdr, b)
	if st := g.readyz(); st != 503 {
		t.Fatalf("readyz while the store fails: %d, want 503", st)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+g.AdminAddr()+"/healthz", nil)
	if st, _, b := do(t, req); st != 200 {
		t.Fatalf("healthz while the store fails: %d %s; the process is up", st, b)
	}
	checkWhole(t, fs.Store, 1)
	if _, err := fs.Store.GetEndpoint(context.Background(), "late"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("endpoint written while the store failed: %v", err)
	}

	fs.set(faultNone, storeWrites...)
	testsupport.WaitFor(t, 10*time.Second, "readyz to recover", func() bool { return g.readyz() == 200 })
	st, hdr, b = g.post("open", body, nil)
	if st != 202 || hdr.Get(inbound.HeaderReplayed) != "" {
		t.Fatalf("ingest after recovery: %d replayed=%q %s; want a first 202", st, hdr.Get(inbound.HeaderReplayed), b)
	}
	st, hdr, b = g.api("POST", "/events", opToken, publish)
	if st != 202 || hdr.Get(inbound.HeaderReplayed) != "" {
		t.Fatalf("publish after recovery: %d replayed=%q %s", st, hdr.Get(inbound.HeaderReplayed), b)
	}
	st, hdr, b = g.api("POST", "/endpoints", opToken, newEP, "Idempotency-Key", "create-late")
	if st != 201 || hdr.Get(inbound.HeaderReplayed) != "" {
		t.Fatalf("create endpoint after recovery: %d replayed=%q %s; a 503 must not be stored under the key", st, hdr.Get(inbound.HeaderReplayed), b)
	}
	checkWhole(t, fs.Store, 1, "down-1", "down-2")
	testsupport.WaitFor(t, 10*time.Second, "both deliveries", func() bool { return rcv.byPath()["/ep"] == 2 })
}

// ambiguousIngest makes Ingest write the event and then fail (the batch
// was committed, its fsync failed: the answer is lost), checks that the
// client got a 503, never a 2xx, and that its retry gets the stored first
// answer with the event whole: exactly one, with its delivery, which is
// not lost. It returns the store and the delivery.
func ambiguousIngest(t *testing.T, rcv *receiver) (*gw, *faultyStore, storage.Delivery) {
	t.Helper()
	g, fs := startFaulty(t, fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q}\n", rcv.url("ep")))
	fs.set(faultAfter, "Ingest")
	body := []byte(`{"id":"amb-1"}`)
	st, hdr, b := g.post("open", body, nil)
	want503(t, "ambiguous ingest", st, hdr, b)

	fs.set(faultNone, "Ingest")
	st, hdr, b = g.post("open", body, nil)
	if st != 202 || hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d replayed=%q %s; want the stored 202", st, hdr.Get(inbound.HeaderReplayed), b)
	}
	evt := must[jsonMap](t, 202)(st, hdr, b)["id"].(string)
	checkWhole(t, fs.Store, 1, "amb-1")
	if st, _, b := g.post("open", []byte(`{"id":"amb-1","v":2}`), nil); st != 422 {
		t.Fatalf("same id, other body: %d %s", st, b)
	}
	return g, fs, deliveriesOf(t, fs.Store, evt)[0]
}

// TestFaultStoreIngestAmbiguous: an Ingest that wrote the event and then
// failed. Besides what ambiguousIngest checks, the delivery is not lost:
// Ingest gives back what it wrote claimed (due now), and it is delivered
// exactly once.
func TestFaultStoreIngestAmbiguous(t *testing.T) {
	rcv := newReceiver(t)
	_, fs, d := ambiguousIngest(t, rcv)
	testsupport.WaitFor(t, 10*time.Second, "the delivery of the ambiguous event", func() bool {
		got, err := fs.Store.GetDelivery(context.Background(), d.ID)
		return err == nil && got.State == storage.StateSucceeded
	})
	if n := rcv.count(); n != 1 {
		t.Fatalf("receiver got %d requests, want 1", n)
	}
}

// TestFaultStoreAmbiguousAcceptDeliversPromptly: the delivery of an event
// whose Ingest wrote it and then failed goes out as soon as the client's
// retry has been answered, not a lease later.
func TestFaultStoreAmbiguousAcceptDeliversPromptly(t *testing.T) {
	rcv := newReceiver(t)
	ambiguousIngest(t, rcv)
	testsupport.WaitFor(t, 10*time.Second, "the delivery of the ambiguous event", func() bool { return rcv.count() == 1 })
}

// TestFaultStoreClaimAndComplete: while Claim fails, a delivery waiting in
// the outbox for its retry stays there (no attempt is spent) and goes out
// when Claim recovers. When Complete fails after the receiver answered,
// the delivery is not reported delivered and no attempt is recorded; it
// stays under the attempt's lease, and an operator's retry is refused (409
// with Retry-After) until the lease ends.
func TestFaultStoreClaimAndComplete(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	g, fs := startFaulty(t, fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q}\n", rcv.url("ep")))
	rcv.failAt("ep", true)
	st, _, b := g.post("open", []byte(`{"id":"claim-1"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "the first, failed attempt", func() bool { return rcv.countAt("ep") == 1 })
	fs.set(faultBefore, "Claim")
	rcv.failAt("ep", false)
	testsupport.WaitFor(t, 10*time.Second, "failed claims", func() bool { return fs.failures("Claim") >= 2 })
	ds := deliveriesOf(t, fs.Store, evt)
	if len(ds) != 1 || ds[0].State != storage.StatePending || ds[0].AttemptCount != 1 || rcv.countAt("ep") != 1 {
		t.Fatalf("while Claim fails: %+v, %d requests; want pending after its one attempt", ds, rcv.countAt("ep"))
	}
	fs.set(faultNone, "Claim")
	testsupport.WaitFor(t, 10*time.Second, "the retry after Claim recovers", func() bool {
		d, err := fs.Store.GetDelivery(context.Background(), ds[0].ID)
		return err == nil && d.State == storage.StateSucceeded && d.AttemptCount == 2 && rcv.countAt("ep") == 2
	})

	fs.set(faultBefore, "Complete")
	st, _, b = g.post("open", []byte(`{"id":"complete-1"}`), nil)
	evt = must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "a failed Complete", func() bool { return fs.failures("Complete") >= 1 })
	ds = deliveriesOf(t, fs.Store, evt)
	if len(ds) != 1 || ds[0].State == storage.StateSucceeded || ds[0].AttemptCount != 0 || rcv.countAt("ep") != 3 {
		t.Fatalf("after a failed Complete: %+v; want not delivered, no attempt counted", ds)
	}
	if as, _ := fs.Store.ListAttempts(context.Background(), ds[0].ID); len(as) != 0 {
		t.Fatalf("attempts %+v recorded although Complete failed", as)
	}
	fs.set(faultNone, "Complete")
	// The delivery is still under the lost attempt's lease: an operator's
	// retry is refused until it ends (then the dispatcher sends it again by
	// itself, TestExpiredLeaseOfACrashedWorkerIsDelivered).
	st, hdr, b := g.api("POST", "/deliveries/"+ds[0].ID+"/retry", opToken, nil)
	wantProblem(t, "retry under the lost attempt's lease", 409, "")(st, hdr, b)
	lease := time.Until(ds[0].LeaseUntil)
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || time.Duration(ra)*time.Second < lease {
		t.Fatalf("Retry-After %q, want at least the lease's remaining %s", hdr.Get("Retry-After"), lease)
	}
	if n := rcv.countAt("ep"); n != 3 {
		t.Fatalf("receiver got %d requests; want no request for the refused retry", n)
	}
}

// TestFaultStoreAdminWrites: admin changes whose store write fails answer
// 503 with Retry-After and change nothing, in the store or in memory (the
// registry is rebuilt from the store only after a write succeeded). An
// idempotent POST whose answer cannot be stored was executed once; its
// retry is told to wait (409) instead of executing again.
func TestFaultStoreAdminWrites(t *testing.T) {
	rcv := newReceiver(t)
	g, fs := startFaulty(t, fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q}\n", rcv.url("ep")))
	before := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/ep", opToken, nil))

	fs.set(faultBefore, "ChangeEndpoint")
	st, hdr, b := g.api("PATCH", "/endpoints/ep", opToken, jsonMap{"url": rcv.url("moved")})
	want503(t, "patch", st, hdr, b)
	st, hdr, b = g.api("POST", "/endpoints/ep/rotate-secret", opToken, nil)
	want503(t, "rotate", st, hdr, b)
	fs.set(faultNone, "ChangeEndpoint")
	fs.set(faultBefore, "PutEndpoint")
	st, hdr, b = g.api("POST", "/endpoints", opToken, jsonMap{"id": "ep2", "tenant": "acme", "url": rcv.url("ep2")})
	want503(t, "create endpoint", st, hdr, b)
	fs.set(faultNone, "PutEndpoint")
	wantProblem(t, "endpoint after a failed create", 404, "")(g.api("GET", "/endpoints/ep2", opToken, nil))
	fs.set(faultBefore, "PutSource")
	st, hdr, b = g.api("POST", "/sources", opToken, jsonMap{"id": "src2", "tenant": "acme", "verify": jsonMap{"scheme": "none"}})
	want503(t, "create source", st, hdr, b)
	fs.set(faultNone, "PutSource")
	after := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/ep", opToken, nil))
	if after.URL != before.URL || after.Secret != before.Secret {
		t.Fatalf("endpoint changed by failed writes: %+v -> %+v", before, after)
	}
	wantProblem(t, "source after a failed create", 404, "")(g.api("GET", "/sources/src2", opToken, nil))
	if st, _, b := g.post("src2", []byte(`{}`), nil); st != 404 {
		t.Fatalf("ingest to a source whose creation failed: %d %s", st, b)
	}
	g.post("open", []byte(`{"id":"after-failed-patch"}`), nil)
	testsupport.WaitFor(t, 10*time.Second, "a delivery to the unchanged URL", func() bool { return rcv.byPath()["/ep"] == 1 })
	if rcv.byPath()["/moved"] != 0 {
		t.Fatal("a failed PATCH moved deliveries to the new URL")
	}

	fs.set(faultBefore, "ClaimKey")
	st, hdr, b = g.api("POST", "/endpoints", opToken, jsonMap{"id": "k1", "tenant": "acme", "url": rcv.url("k1")}, "Idempotency-Key", "k1")
	want503(t, "claim key", st, hdr, b)
	fs.set(faultNone, "ClaimKey")
	wantProblem(t, "endpoint after a failed claim", 404, "")(g.api("GET", "/endpoints/k1", opToken, nil))

	fs.set(faultBefore, "FinishKey")
	k2 := jsonMap{"id": "k2", "tenant": "acme", "url": rcv.url("k2")}
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken, k2, "Idempotency-Key", "k2"))
	fs.set(faultNone, "FinishKey")
	st, hdr, b = g.api("POST", "/endpoints", opToken, k2, "Idempotency-Key", "k2")
	if st != 409 || hdr.Get("Retry-After") == "" {
		t.Fatalf("retry of an executed request whose answer was not stored: %d Retry-After=%q %s; want 409", st, hdr.Get("Retry-After"), b)
	}
	eps := must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints", opToken, nil))
	if len(eps.Data) != 2 {
		t.Fatalf("%d endpoints, want ep and k2 once", len(eps.Data))
	}
}

// Full disk: a real tmpfs of fullDiskSize holds the store; the gateway runs
// in a child process (this test binary again), so that whatever the store
// does when the disk fills cannot take the test process down with it.
const (
	fullDiskSize  = "300m"
	roomyDiskSize = "600m"
	fillBody      = 256 << 10
	// childEnv carries the child gateway's config; childTest is the test
	// function that runs it.
	childEnv  = "HOOKGATE_TEST_CHILD_CONFIG"
	childTest = "TestFaultHelperGatewayProcess"
)

// TestFaultHelperGatewayProcess is not a test: it is the gateway process
// of the full-disk tests, started by them with a config in childEnv. It
// prints its addresses and serves until its stdin closes.
func TestFaultHelperGatewayProcess(t *testing.T) {
	text := os.Getenv(childEnv)
	if text == "" {
		t.Skip("helper process of the full-disk tests; runs only when they start it")
	}
	cfg, err := config.Parse([]byte(text), "child.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	g, err := New(context.Background(), cfg, Options{Logger: log, Grace: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("READY %s %s\n", g.PublicAddr(), g.AdminAddr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := g.Shutdown(); err != nil {
		t.Log(err)
	}
}

// child is a gateway process.
type child struct {
	cmd           *exec.Cmd
	stdin         io.WriteCloser
	stderr        *syncBuffer
	exited        chan struct{}
	err           error // the exit status, after exited is closed
	public, admin string
}

// startChild starts a gateway process on cfg and waits until it listens.
func startChild(t *testing.T, cfg string) *child {
	t.Helper()
	c := &child{stderr: &syncBuffer{}, exited: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^"+childTest+"$", "-test.count=1")
	c.cmd.Env = append(os.Environ(), childEnv+"="+cfg)
	c.cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				ready <- line
			}
		}
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(c.stop)
	select {
	case line := <-ready:
		c.public, c.admin, _ = strings.Cut(line, " ")
	case <-c.exited:
		t.Fatalf("gateway process exited before listening: %v\n%s", c.err, c.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway process not listening after 30s\n%s", c.stderr.String())
	}
	return c
}

// alive reports whether the process is still running.
func (c *child) alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// stop closes the process's stdin (a graceful shutdown) and kills it if it
// has not exited within a few seconds. Idempotent.
func (c *child) stop() {
	_ = c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// fullDiskConfig is the child's config: a store on dir, 1 MiB bodies, one
// unsigned source and one endpoint.
func fullDiskConfig(dir, receiverURL string) string {
	return fmt.Sprintf(`
server: {listen: "127.0.0.1:0", max_body: 1MiB}
admin:
  listen: "127.0.0.1:0"
  tokens: [{token: %s}]
storage: {path: %q}
delivery:
  allow_private_targets: true
  timeout: 2s
  retry: {initial_interval: 20ms, max_interval: 100ms, max_attempts: 5}
sources:
  - {id: open, tenant: acme, verify: {scheme: none}, event_id: json:/id}
endpoints:
  - {id: ep, tenant: acme, url: %q}
`, opToken, dir, receiverURL)
}

// accepted is an event the gateway answered 202 for.
type accepted struct {
	id   string
	body []byte
}

// fillResult is how filling the disk ended.
type fillResult int

const (
	// fillRefused: the gateway answered 503 with Retry-After.
	fillRefused fillResult = iota
	// fillBroken: the request got no answer (the process died).
	fillBroken
)

// fill posts 256 KiB events until the gateway stops answering 202. Every
// 202'd event is returned. More than four times the disk's size answered
// 202 fails the test: those events cannot all be on disk.
func fill(t *testing.T, c *child) ([]accepted, fillResult) {
	t.Helper()
	var acks []accepted
	pad := make([]byte, fillBody*3/4)
	for i := range 256 {
		_, _ = rand.Read(pad)
		body := fmt.Appendf(nil, `{"id":"fill-%d","pad":%q}`, i, base64.StdEncoding.EncodeToString(pad))
		req, _ := http.NewRequest(http.MethodPost, "http://"+c.public+"/ingest/open", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return acks, fillBroken
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		switch {
		case err != nil:
			return acks, fillBroken
		case resp.StatusCode == 202:
			acks = append(acks, accepted{id: must[jsonMap](t, 202)(resp.StatusCode, resp.Header, b)["id"].(string), body: body})
		case resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "":
			return acks, fillRefused
		default:
			t.Fatalf("event %d: %d %s; want 202 or 503 with Retry-After", i, resp.StatusCode, b)
		}
	}
	t.Fatalf("%d events of %d KiB answered 202 on a %s disk", len(acks), fillBody>>10, fullDiskSize)
	return nil, 0
}

// adminGet is GET <admin listener><path> on a child, as the operator.
func (c *child) adminGet(t *testing.T, path string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+c.admin+path, nil)
	req.Header.Set("Authorization", "Bearer "+opToken)
	return do(t, req)
}

// checkAcked asserts that every acknowledged event is readable, with its
// body, from a gateway on the same store.
func checkAcked(t *testing.T, c *child, acks []accepted) {
	t.Helper()
	for _, a := range acks {
		st, _, b := c.adminGet(t, "/api/v1/events/"+a.id)
		if st != 200 {
			t.Fatalf("acknowledged event %s: %d %s", a.id, st, b)
		}
		if v := must[admin.Event](t, 200)(st, nil, b); v.Body == nil || *v.Body != string(a.body) {
			t.Fatalf("acknowledged event %s has a different body", a.id)
		}
	}
}

// TestFaultFullDiskNeverAcksUnpersisted fills a real 16 MiB disk until the
// gateway stops answering 202, however it stops, then restarts a gateway on
// the same store with room freed: every event answered 202 is there, with
// its body, and new events are accepted and delivered.
func TestFaultFullDiskNeverAcksUnpersisted(t *testing.T) {
	dir := tmpfs.Mount(t, fullDiskSize)
	rcv := newReceiver(t)
	cfg := fullDiskConfig(dir, rcv.url("ep"))
	c := startChild(t, cfg)
	acks, how := fill(t, c)
	if len(acks) == 0 {
		t.Fatal("nothing was accepted: the disk was full from the start")
	}
	c.stop()
	t.Logf("%d events acknowledged before the disk was full; then %s; the process exited with %v",
		len(acks), map[fillResult]string{fillRefused: "503", fillBroken: "no answer"}[how], c.err)

	tmpfs.Resize(t, dir, roomyDiskSize)
	c = startChild(t, cfg)
	checkAcked(t, c, acks)
	req, _ := http.NewRequest(http.MethodPost, "http://"+c.public+"/ingest/open", strings.NewReader(`{"id":"after-room"}`))
	if st, _, b := do(t, req); st != 202 {
		t.Fatalf("ingest with room again: %d %s", st, b)
	}
	testsupport.WaitFor(t, 15*time.Second, "the delivery of the new event", func() bool {
		for _, r := range rcv.all() {
			if string(r.body) == `{"id":"after-room"}` {
				return true
			}
		}
		return false
	})
}

// TestFaultFullDiskAnswers503AndRecovers: on a full disk the running
// gateway answers 503 with Retry-After and /readyz says 503; when room is
// made (the tmpfs grows) the same process recovers without a restart.
func TestFaultFullDiskAnswers503AndRecovers(t *testing.T) {
	dir := tmpfs.Mount(t, fullDiskSize)
	rcv := newReceiver(t)
	c := startChild(t, fullDiskConfig(dir, rcv.url("ep")))
	acks, how := fill(t, c)
	if how != fillRefused || !c.alive() {
		t.Fatalf("after %d events the gateway stopped answering (process alive: %v)\n%s", len(acks), c.alive(), c.stderr.String())
	}
	if st, _, b := c.adminGet(t, "/readyz"); st != 503 {
		t.Fatalf("readyz on a full disk: %d %s", st, b)
	}
	tmpfs.Resize(t, dir, roomyDiskSize)
	testsupport.WaitFor(t, 10*time.Second, "readyz to recover", func() bool { st, _, _ := c.adminGet(t, "/readyz"); return st == 200 })
	req, _ := http.NewRequest(http.MethodPost, "http://"+c.public+"/ingest/open", strings.NewReader(`{"id":"after-room"}`))
	if st, _, b := do(t, req); st != 202 {
		t.Fatalf("ingest with room again: %d %s", st, b)
	}
	checkAcked(t, c, acks)
}
