package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
	"hookgate/storage/badger"
)

// cancelStore is the real store whose CancelEndpoint can be held until
// released (a large backlog) or made to fail once.
type cancelStore struct {
	storage.Store
	hold    chan struct{} // non-nil: CancelEndpoint waits until closed
	entered chan struct{}
	once    sync.Once
	mu      sync.Mutex
	fail    bool
}

func (s *cancelStore) CancelEndpoint(ctx context.Context, ep string) (int, error) {
	s.mu.Lock()
	fail := s.fail
	s.fail = false
	s.mu.Unlock()
	if fail {
		return 0, errors.New("injected: write failed")
	}
	if s.hold != nil {
		s.once.Do(func() { close(s.entered) })
		select {
		case <-s.hold:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return s.Store.CancelEndpoint(ctx, ep)
}

// doomedEndpoint creates endpoint "doomed" of tenant acme, which refuses
// connections and retries only hourly, and ingests n events for it.
func doomedEndpoint(t *testing.T, g *gw, n int) {
	t.Helper()
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{
		"id": "doomed", "url": "http://127.0.0.1:1/refused", "sources": []string{"open"},
		"retry": jsonMap{"initial_interval": "1h", "max_interval": "1h", "max_elapsed": "2h", "randomization": 0},
	}))
	for i := range n {
		if st, _, b := g.post("open", []byte(`{"id":"doomed-`+string(rune('a'+i))+`","type":"t"}`), nil); st != 202 {
			t.Fatalf("ingest: %d %s", st, b)
		}
	}
}

// liveDeliveries counts the pending or delivering deliveries of endpoint
// "doomed".
func liveDeliveries(t *testing.T, s storage.Store) int {
	t.Helper()
	ds, _, err := s.ListDeliveries(context.Background(), storage.DeliveryFilter{Endpoint: "doomed", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range ds {
		if !d.State.Terminal() {
			n++
		}
	}
	return n
}

// TestDeletingAnEndpointWithABacklogHoldsUpNoOtherChange: cancelling a
// large backlog takes minutes. Meanwhile every other catalog change, of
// any tenant, goes on (before, all of them waited, so an idempotent POST
// could outlive its key's lease and run twice); only an endpoint with the
// deleted id waits, or it would get the old one's deliveries.
func TestDeletingAnEndpointWithABacklogHoldsUpNoOtherChange(t *testing.T) {
	cs := &cancelStore{hold: make(chan struct{}), entered: make(chan struct{})}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { cs.Store = s; return cs }})
	var once sync.Once
	release := func() { once.Do(func() { close(cs.hold) }) }
	t.Cleanup(release)
	doomedEndpoint(t, g, 2)

	deleted := make(chan int, 1)
	go func() {
		st, _, _ := g.api("DELETE", "/endpoints/doomed", acmeToken, nil)
		deleted <- st
	}()
	<-cs.entered
	client := &http.Client{Timeout: 5 * time.Second}
	for _, c := range []struct{ token, body string }{
		{acmeToken, `{"id":"other","url":"http://receiver.test/other"}`},
		{opToken, `{"id":"globex-ep","tenant":"globex","url":"http://receiver.test/globex"}`},
	} {
		req, _ := http.NewRequest("POST", "http://"+g.AdminAddr()+"/api/v1/endpoints", strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+c.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST /endpoints while a backlog is being cancelled: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("POST /endpoints while a backlog is being cancelled: %d", resp.StatusCode)
		}
	}
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "doomed", "url": "http://receiver.test/new"})
	if p := wantProblem(t, "the deleted id", 409, "id")(st, hdr, b); !strings.HasSuffix(p.Type, "endpoint-being-deleted") || hdr.Get("Retry-After") == "" {
		t.Fatalf("problem %+v, Retry-After %q", p, hdr.Get("Retry-After"))
	}

	release()
	if st := <-deleted; st != 204 {
		t.Fatalf("DELETE: %d", st)
	}
	if n := liveDeliveries(t, g.Store()); n != 0 {
		t.Fatalf("%d deliveries of the deleted endpoint still live after the 204", n)
	}
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "doomed", "url": "http://receiver.test/new"}))
}

// TestAFailedBacklogCancelIsRetried: the endpoint is gone once DELETE
// has deleted it; a cancel of its deliveries that fails is retried in the
// background, so none stays pending for an endpoint that no longer exists.
func TestAFailedBacklogCancelIsRetried(t *testing.T) {
	cs := &cancelStore{}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { cs.Store = s; return cs }})
	doomedEndpoint(t, g, 2)
	cs.mu.Lock()
	cs.fail = true
	cs.mu.Unlock()
	must[jsonMap](t, 204)(g.api("DELETE", "/endpoints/doomed", acmeToken, nil))
	waitFor(t, 10*time.Second, "the backlog to be cancelled", func() bool { return liveDeliveries(t, g.Store()) == 0 })
	wantProblem(t, "deleted", 404, "")(g.api("GET", "/endpoints/doomed", acmeToken, nil))
	if !strings.Contains(g.logs.String(), "will retry") {
		t.Fatalf("the failed cancel was not logged:\n%s", g.logs.String())
	}
}

// TestABacklogLeftByACrashIsCancelledAtStart: a process that died between
// deleting an endpoint and cancelling its deliveries left them pending
// for nobody. The next start finds and cancels them, and keeps the id
// from being reused until then.
func TestABacklogLeftByACrashIsCancelledAtStart(t *testing.T) {
	g := startGateway(t, gwOptions{})
	doomedEndpoint(t, g, 3)
	dir := g.dir
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// What the crashed process got done: the endpoint deleted, no more.
	db, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteEndpoint(context.Background(), "doomed"); err != nil {
		t.Fatal(err)
	}
	if n := liveDeliveries(t, db); n != 3 {
		t.Fatalf("%d live deliveries before the restart, want 3", n)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	g = startGateway(t, gwOptions{dir: dir})
	waitFor(t, 10*time.Second, "the orphaned backlog to be cancelled", func() bool { return liveDeliveries(t, g.Store()) == 0 })
	waitFor(t, 10*time.Second, "the id to be free again", func() bool {
		st, _, _ := g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "doomed", "url": "http://receiver.test/new"})
		return st == 201
	})
	if !strings.Contains(g.logs.String(), "an endpoint deleted earlier still has live deliveries") {
		t.Fatalf("the orphaned backlog was not logged:\n%s", g.logs.String())
	}
}
