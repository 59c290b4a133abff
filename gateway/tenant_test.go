package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// Endpoint ids are global, so once acme deletes its endpoint "shared",
// globex may create one with the same id. acme's old delivery to "shared"
// is still acme's and retryable; in an earlier version, POST
// /deliveries/{id}/retry looked the endpoint up by id only, answered 202,
// and the dispatcher sent acme's event to globex's URL, signed with
// globex's secret (SPEC 5: a tenant sees and changes only its tenant).
// The retry is refused like any retry of a deleted endpoint's delivery.
func TestRetryRefusesAnEndpointIDTakenByAnotherTenant(t *testing.T) {
	acmeRcv := newReceiver(t)
	globexRcv := newReceiver(t)
	g := startGateway(t, gwOptions{})

	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "shared", "url": acmeRcv.url("acme")}))
	st, _, b := g.post("open", []byte(`{"id":"acme-private-1","type":"payroll.run","ssn":"123-45-6789"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	var dlv string
	testsupport.WaitFor(t, 10*time.Second, "acme's delivery to succeed", func() bool {
		ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+evt, acmeToken, nil)).Data
		if len(ds) == 1 && ds[0].State == "succeeded" {
			dlv = ds[0].ID
			return true
		}
		return false
	})

	// acme deletes its endpoint; the id is free, and globex takes it.
	if st, _, b := g.api("DELETE", "/endpoints/shared", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{"id": "shared", "tenant": "globex", "url": globexRcv.url("globex")}))
	// globex's endpoint is invisible to acme.
	wantProblem(t, "globex's endpoint as seen by acme", 404, "")(g.api("GET", "/endpoints/shared", acmeToken, nil))

	// acme retries its own old delivery.
	wantProblem(t, "retry after the endpoint id moved to another tenant", 409, "-")(
		g.api("POST", "/deliveries/"+dlv+"/retry", acmeToken, nil))
	if n := globexRcv.count(); n != 0 {
		t.Fatalf("globex's receiver got %d requests", n)
	}
}

// gatedStore holds the next Ingest, once armed, until gate is closed, and
// reports DeleteEndpoint calls on deleting.
type gatedStore struct {
	storage.Store
	armed    atomic.Bool
	entered  chan struct{}
	gate     chan struct{}
	deleting chan struct{}
}

func (s *gatedStore) DeleteEndpoint(ctx context.Context, id string) error {
	select {
	case s.deleting <- struct{}{}:
	default:
	}
	return s.Store.DeleteEndpoint(ctx, id)
}

func (s *gatedStore) Ingest(ctx context.Context, req *storage.IngestRequest) (storage.IngestResult, error) {
	if s.armed.CompareAndSwap(true, false) {
		s.entered <- struct{}{}
		<-s.gate
	}
	return s.Store.Ingest(ctx, req)
}

// An ingest reads the endpoints (a snapshot) before its store write; a
// DELETE /endpoints/{id} cancels the endpoint's live deliveries. In an
// earlier version nothing ordered the two: a delete that ran while an ingest
// was between its snapshot and its write answered 204, and the ingest
// then wrote a pending delivery to the deleted endpoint that nobody
// cancelled (and that another tenant's endpoint with the same id would
// have claimed). Now the delete waits for such writes.
//
// The test holds one ingest inside Store.Ingest, starts the delete, and
// lets the ingest go on as soon as the delete reaches the store, or after
// two seconds if it does not (it must not: it waits for the ingest).
func TestDeleteEndpointWaitsForIngestsInFlight(t *testing.T) {
	t.Parallel()
	acmeRcv := newReceiver(t)
	gs := &gatedStore{entered: make(chan struct{}), gate: make(chan struct{}), deleting: make(chan struct{}, 1)}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { gs.Store = s; return gs }})

	// A slow rate limit: after the first delivery the endpoint has no
	// token, so the racing ingest writes its delivery pending (no hand-off).
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "shared", "url": acmeRcv.url("acme"), "rate_limit": 0.01}))
	st, _, b := g.post("open", []byte(`{"id":"warm-up"}`), nil)
	must[jsonMap](t, 202)(st, nil, b)
	testsupport.WaitFor(t, 10*time.Second, "the first delivery", func() bool { return acmeRcv.count() == 1 })

	gs.armed.Store(true)
	type answer struct {
		st   int
		body []byte
		err  error
	}
	ingested := make(chan answer, 1)
	go func() {
		resp, err := http.Post("http://"+g.PublicAddr()+"/ingest/open", "application/json",
			strings.NewReader(`{"id":"acme-2"}`))
		if err != nil {
			ingested <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		ingested <- answer{resp.StatusCode, body, err}
	}()
	<-gs.entered // the ingest holds its snapshot (with "shared") and waits to write
	deleted := make(chan int, 1)
	go func() {
		st, _, _ := g.api("DELETE", "/endpoints/shared", acmeToken, nil)
		deleted <- st
	}()
	select {
	case <-gs.deleting:
		t.Error("the delete reached the store while an ingest with the endpoint was in flight")
	case <-time.After(2 * time.Second):
	}
	close(gs.gate)
	a := <-ingested
	if a.err != nil {
		t.Fatal(a.err)
	}
	evt := must[jsonMap](t, 202)(a.st, nil, a.body)["id"].(string)
	if st := <-deleted; st != 204 {
		t.Fatalf("delete: %d", st)
	}
	ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+evt, acmeToken, nil)).Data
	if len(ds) != 1 || ds[0].State != "cancelled" {
		t.Fatalf("deliveries of the racing event %+v, want one, cancelled by the delete", ds)
	}
}

// unsweptStore never purges: the state between an event passing the
// retention cutoff and the next retention sweep.
type unsweptStore struct{ storage.Store }

func (unsweptStore) Purge(context.Context, time.Time, time.Time, int) (int, error) { return 0, nil }

// An id older than retention answers 410 when no event has it. In an
// earlier version one that existed in another tenant, not yet swept, answered
// 404: a tenant token could tell the two apart (SPEC 5: no existence leak).
func TestExpiredEventIDsDoNotRevealOtherTenants(t *testing.T) {
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { return unsweptStore{s} }})
	old := time.Now().UTC().Add(-31 * 24 * time.Hour) // retention is 720h by default
	ev := storage.Event{
		ID: storage.NewID("evt_", old), Tenant: "globex", Source: "other", EventID: "old-1", ReceivedAt: old,
		ContentType: "application/json", Body: []byte(`{}`), IdempotencyKey: storage.IdempotencyKey("globex", "other", "old-1"),
	}
	if _, err := g.Store().Ingest(context.Background(), &storage.IngestRequest{
		Key: storage.DedupeKey{Tenant: "globex", Source: "other", EventID: "old-1"}, BodyHash: sha256.Sum256(ev.Body),
		DedupeUntil: time.Now().Add(time.Hour), Event: ev, Response: storage.Response{Status: 202, Body: []byte(`{}`)},
	}); err != nil {
		t.Fatal(err)
	}
	never := storage.NewID("evt_", old)
	for _, r := range []struct{ method, path string }{{"GET", "/events/%s"}, {"POST", "/events/%s/replay"}} {
		fst, _, fb := g.api(r.method, fmt.Sprintf(r.path, ev.ID), acmeToken, nil)
		nst, _, nb := g.api(r.method, fmt.Sprintf(r.path, never), acmeToken, nil)
		if fst != nst || !bytes.Equal(fb, nb) {
			t.Errorf("%s %s as acme: globex's old event %d %s, an id that never existed %d %s; want the same answer",
				r.method, r.path, fst, fb, nst, nb)
		}
	}
}

// An endpoint's sources filter names source ids, and source ids are
// global. acme's endpoint keeps naming "shared-src" after acme deletes that
// source (a PATCH must not be refused for it), and globex then creates its
// own "shared-src": globex's events must never reach acme's endpoint, and
// a PATCH (by acme or by the operator) may not add globex's source to
// acme's filter either.
func TestSourceFilterNeverCrossesTenantsWhenASourceIDIsReused(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: globex-all, tenant: globex, url: %q}
`, rcv.url("globex"))})
	must[jsonMap](t, 201)(g.api("POST", "/sources", acmeToken, jsonMap{"id": "shared-src", "verify": jsonMap{"scheme": "none"}}))
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{
		"id": "acme-filtered", "url": rcv.url("acme"), "sources": []string{"shared-src"}}))
	if st, _, b := g.post("shared-src", []byte(`{"n":1}`), nil); st != 202 {
		t.Fatalf("acme ingest: %d %s", st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "acme's delivery", func() bool { return rcv.byPath()["/acme"] == 1 })

	if st, _, b := g.api("DELETE", "/sources/shared-src", acmeToken, nil); st != 204 {
		t.Fatalf("delete source: %d %s", st, b)
	}
	must[jsonMap](t, 201)(g.api("POST", "/sources", opToken, jsonMap{"id": "shared-src", "tenant": "globex", "verify": jsonMap{"scheme": "none"}}))
	// The kept filter still lets acme PATCH its endpoint.
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/acme-filtered", acmeToken, jsonMap{"timeout": "3s"}))
	// Adding globex's source is refused, for acme and for the operator.
	wantProblem(t, "acme adds globex's source", 422, "sources[1]")(g.api("PATCH", "/endpoints/acme-filtered", acmeToken,
		jsonMap{"sources": []string{"shared-src", "other"}}))
	wantProblem(t, "operator adds globex's source", 422, "sources[1]")(g.api("PATCH", "/endpoints/acme-filtered", opToken,
		jsonMap{"sources": []string{"shared-src", "other"}}))

	for i := range 3 {
		if st, _, b := g.post("shared-src", []byte(fmt.Sprintf(`{"n":%d}`, 10+i)), nil); st != 202 {
			t.Fatalf("globex ingest: %d %s", st, b)
		}
	}
	testsupport.WaitFor(t, 10*time.Second, "globex's deliveries", func() bool { return rcv.byPath()["/globex"] == 3 })
	// Replays of globex's events (every endpoint that matches now) stay in globex.
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", opToken, jsonMap{"source": "shared-src"}))
	waitReplay(t, g, opToken, job.ID)
	testsupport.WaitFor(t, 10*time.Second, "globex's replayed deliveries", func() bool { return rcv.byPath()["/globex"] == 6 })
	if n := rcv.byPath()["/acme"]; n != 1 {
		t.Fatalf("acme's endpoint got %d deliveries; want only acme's own event", n)
	}
	ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=acme-filtered", opToken, nil)).Data
	if len(ds) != 1 {
		t.Fatalf("acme-filtered has %d deliveries; want 1", len(ds))
	}
}
