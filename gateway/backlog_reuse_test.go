package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// TestOrphanBacklogIsNotAdoptedByEndpointRecreatedFromConfig: a config
// endpoint removed from config.yaml is deleted at start and its backlog
// cancelled in the background. If that has not finished when the process
// stops (a large backlog, a failing write), and config.yaml names the id
// again at the next start, the new endpoint must not get the old one's
// deliveries.
func TestOrphanBacklogIsNotAdoptedByEndpointRecreatedFromConfig(t *testing.T) {
	const doomedCfg = "endpoints:\n  - {id: doomed, tenant: acme, url: %q, sources: [open], retry: {initial_interval: 1s, max_interval: 1s, max_attempts: 1000}}\n"
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(doomedCfg, "http://127.0.0.1:1/refused")})
	for _, id := range []string{"old-a", "old-b"} {
		if st, _, b := g.post("open", []byte(`{"id":"`+id+`","type":"t"}`), nil); st != 202 {
			t.Fatalf("ingest: %d %s", st, b)
		}
	}
	old := liveDeliveryIDs(t, g.Store())
	if len(old) != 2 {
		t.Fatalf("%d live deliveries, want 2", len(old))
	}

	// Next start: the endpoint is gone from config.yaml; its backlog's
	// cancel does not get done before the process stops.
	cs := &cancelStore{hold: make(chan struct{}), entered: make(chan struct{})}
	g = g.restart(gwOptions{wrapStore: func(s storage.Store) storage.Store { cs.Store = s; return cs }})
	<-cs.entered
	dir := g.dir
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}

	// The start after: config.yaml names the id again, at a new URL.
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
	t.Cleanup(srv.Close)
	g = startGateway(t, gwOptions{dir: dir, extra: fmt.Sprintf(doomedCfg, srv.URL)})
	testsupport.WaitFor(t, 10*time.Second, "the old deliveries to be final", func() bool {
		for _, id := range old {
			d, err := g.Store().GetDelivery(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if !d.State.Terminal() {
				return false
			}
		}
		return true
	})
	for _, id := range old {
		d, _ := g.Store().GetDelivery(context.Background(), id)
		if d.State != storage.StateCancelled {
			t.Errorf("delivery %s of the deleted endpoint is %s, want cancelled", id, d.State)
		}
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("the re-created endpoint received %d requests of the deleted endpoint's backlog", n)
	}
}

// liveDeliveryIDs lists the pending or delivering deliveries of "doomed".
func liveDeliveryIDs(t *testing.T, s storage.Store) []string {
	t.Helper()
	ds, _, err := s.ListDeliveries(context.Background(), storage.DeliveryFilter{Endpoint: "doomed", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range ds {
		if !d.State.Terminal() {
			ids = append(ids, d.ID)
		}
	}
	return ids
}
