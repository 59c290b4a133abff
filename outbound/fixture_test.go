package outbound

import (
	"cmp"
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
	"hookgate/storage/badger"
)

var _ Store = (*badger.DB)(nil)

// quiet discards the logs of the code under test.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openDB opens a real Badger store in a fresh directory, closed at cleanup.
func openDB(t testing.TB) (*badger.DB, string) {
	t.Helper()
	dir := t.TempDir()
	db, err := badger.Open(dir, badger.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, dir
}

// fastRetry is a policy in milliseconds, without jitter, that never gives
// up on its own within a test.
var fastRetry = storage.RetryPolicy{
	InitialInterval: 5 * time.Millisecond,
	Multiplier:      2,
	MaxInterval:     20 * time.Millisecond,
	MaxAttempts:     1000,
	MaxElapsed:      time.Hour,
}

// testEndpoint is an endpoint of tenant "acme" posting to url, with one
// signing secret and a millisecond retry policy, stored in db.
func testEndpoint(t testing.TB, db *badger.DB, id, url string, mod ...func(*storage.Endpoint)) storage.Endpoint {
	t.Helper()
	now := time.Now().UTC()
	ep := storage.Endpoint{
		ID: id, Tenant: "acme", URL: url,
		Secrets: []storage.Secret{{Value: NewSecret()}},
		Timeout: 2 * time.Second, MaxInFlight: 4, Retry: fastRetry,
		CreatedAt: now, UpdatedAt: now,
	}
	for _, m := range mod {
		m(&ep)
	}
	if err := db.PutEndpoint(context.Background(), &ep); err != nil {
		t.Fatal(err)
	}
	return ep
}

// event is what a test ingests.
type event struct {
	source      string
	typ         string
	contentType string
	body        []byte
}

func (e event) withDefaults() event {
	if e.source == "" {
		e.source = "stripe"
	}
	if e.typ == "" {
		e.typ = "invoice.paid"
	}
	if e.contentType == "" {
		e.contentType = "application/json"
	}
	if e.body == nil {
		e.body = []byte(`{"id":"evt_1","type":"invoice.paid"}`)
	}
	return e
}

// accept stores one event with a delivery, due now, to each endpoint, the
// way ingest does: through Ingest.
func accept(t testing.TB, db *badger.DB, e event, eps ...storage.Endpoint) []storage.Delivery {
	t.Helper()
	e = e.withDefaults()
	now := time.Now().UTC()
	evID := storage.NewID("evt_", now)
	providerID := "p_" + evID
	key := storage.IdempotencyKey("acme", e.source, providerID)
	var ds []storage.Delivery
	for _, ep := range eps {
		ds = append(ds, storage.Delivery{
			ID: storage.NewID("dlv_", now), Event: evID, Tenant: "acme", Endpoint: ep.ID,
			IdempotencyKey: key, State: storage.StatePending,
			CreatedAt: now, NextAttemptAt: now, RetryFrom: now, UpdatedAt: now,
		})
	}
	_, err := db.Ingest(context.Background(), &storage.IngestRequest{
		Key:         storage.DedupeKey{Tenant: "acme", Source: e.source, EventID: providerID},
		BodyHash:    sha256.Sum256(e.body),
		DedupeUntil: now.Add(time.Hour),
		Event: storage.Event{
			ID: evID, Tenant: "acme", Source: e.source, EventID: providerID, Type: e.typ,
			ReceivedAt: now, ContentType: e.contentType, Body: e.body, IdempotencyKey: key,
		},
		Deliveries: ds,
		Response:   storage.Response{Status: http.StatusAccepted, Body: []byte(`{}`)},
	})

	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// startDispatcher starts a dispatcher on db for eps, with a client that
// may reach the test servers on loopback; it is stopped at cleanup.
func startDispatcher(t testing.TB, db Store, cfg Config, eps ...storage.Endpoint) *Dispatcher {
	t.Helper()
	cfg.Store = db
	if cfg.Client == nil {
		cfg.Client = NewClient(true)
	}
	t.Cleanup(cfg.Client.CloseIdleConnections) // after Stop (cleanups run last first)
	cfg.Version = "test"
	cfg.Poll = cmp.Or(cfg.Poll, 50*time.Millisecond)
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.SetEndpoints(eps)
	d.Start(context.Background())
	t.Cleanup(func() { d.Stop(time.Second) })
	return d
}

// delivery reads a delivery from the store.
func delivery(t testing.TB, db *badger.DB, id string) storage.Delivery {
	t.Helper()
	d, err := db.GetDelivery(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// attempts reads a delivery's attempts from the store.
func attempts(t testing.TB, db *badger.DB, id string) []storage.Attempt {
	t.Helper()
	as, err := db.ListAttempts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// inState returns a condition for waitFor: the delivery is in state s.
func inState(t testing.TB, db *badger.DB, id string, s storage.DeliveryState) func() bool {
	return func() bool { return delivery(t, db, id).State == s }
}

// received is one request a receiver got.
type received struct {
	at     time.Time
	path   string
	header http.Header
	body   []byte
}

// receiver is a real HTTP endpoint that records every request and answers
// with handle (n counts requests from 1).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []received
	active int // requests being handled now
	peak   int // most requests handled at once
	handle func(w http.ResponseWriter, r *http.Request, n int)
}

// newReceiver starts a receiver, closed at cleanup. A nil handle answers 200.
func newReceiver(t testing.TB, handle func(w http.ResponseWriter, r *http.Request, n int)) *receiver {
	t.Helper()
	rc := &receiver{handle: handle}
	rc.Server = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, received{at: time.Now(), path: r.URL.Path, header: r.Header.Clone(), body: body})
	n := len(rc.reqs)
	rc.active++
	rc.peak = max(rc.peak, rc.active)
	rc.mu.Unlock()
	defer func() {
		rc.mu.Lock()
		rc.active--
		rc.mu.Unlock()
	}()
	if rc.handle != nil {
		rc.handle(w, r, n)
	}
}

// count is how many requests arrived.
func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.reqs)
}

// inFlight is how many requests are being handled now.
func (rc *receiver) inFlight() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.active
}

// maxInFlight is the most requests handled at once.
func (rc *receiver) maxInFlight() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.peak
}

// request returns the i-th request (from 0).
func (rc *receiver) request(i int) received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.reqs[i]
}

// all returns every request so far.
func (rc *receiver) all() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.reqs...)
}

// status answers a fixed status for the first n requests, then 200.
func status(code, n int) func(w http.ResponseWriter, r *http.Request, i int) {
	return func(w http.ResponseWriter, r *http.Request, i int) {
		if i <= n {
			w.WriteHeader(code)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
}
