package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

// metricLine returns the value text of one metric line (name{labels}) on
// /metrics, "" when absent.
func (h *gw) metricLine(series string) string {
	h.t.Helper()
	resp, err := http.Get("http://" + h.AdminAddr() + "/metrics")
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// An attempt already in flight when acme deletes its endpoint "shared"
// keeps running (SetEndpoints only stops the loop claiming). In an
// earlier version, if it then got 410 Gone, Dispatcher.disable persisted
// "disabled" by endpoint id without checking that the stored endpoint was
// still the one the attempt was sent to. Endpoint ids are global: globex has meanwhile created its own
// "shared", and acme's old receiver disables globex's endpoint
// (SPEC 5: a tenant changes only its tenant).
func TestStale410DoesNotDisableAnotherTenantsEndpoint(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-time.After(15 * time.Second):
		}
		w.WriteHeader(http.StatusGone)
	}))
	t.Cleanup(old.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	globexRcv := newReceiver(t)
	g := startGateway(t, gwOptions{})

	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken,
		jsonMap{"id": "shared", "url": old.URL + "/acme", "timeout": "20s"}))
	must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"gone-1","type":"x"}`), nil))
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery never reached acme's receiver")
	}

	// acme deletes its endpoint while the attempt is in flight; globex
	// takes the id.
	if st, _, b := g.api("DELETE", "/endpoints/shared", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	must[endpointView](t, 201)(g.api("POST", "/endpoints", opToken,
		jsonMap{"id": "shared", "tenant": "globex", "url": globexRcv.url("globex")}))

	// acme's old receiver answers 410 to the old attempt.
	close(release)
	// The attempt's slot is freed only after its outcome (and any disable)
	// was handled: wait for it.
	waitFor(t, 15*time.Second, "the old attempt to finish", func() bool {
		return g.metricLine(`hookgate_delivery_in_flight{endpoint="shared"}`) == "0"
	})
	ep := must[endpointView](t, 200)(g.api("GET", "/endpoints/shared", opToken, nil))
	if ep.Tenant != "globex" {
		t.Fatalf("endpoint shared is %q's", ep.Tenant)
	}
	if ep.Disabled {
		t.Fatalf("globex's new endpoint %q was disabled by a 410 from acme's deleted endpoint's URL (reason %q)",
			ep.ID, ep.DisabledReason)
	}
}

// cancelGatedStore holds CancelEndpoint, once armed, until gate closes.
type cancelGatedStore struct {
	storage.Store
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (s *cancelGatedStore) CancelEndpoint(ctx context.Context, id string) (int, error) {
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.gate
	}
	return s.Store.CancelEndpoint(ctx, id)
}

// deleteEndpoint held the registry's inUse lock exclusively across
// CancelEndpoint (its first version), which cancels the
// endpoint's whole backlog, 512 deliveries per durable write.
// Every ingest and POST /events of every tenant takes inUse (read side)
// first, so all of them stalled for as long as that cancel runs, though the
// lock is needed only until the registry no longer lists the endpoint
// (writers after that never target it; writers before it are done).
// Deleting an endpoint with a large backlog (the usual reason to delete
// one) then stalled ingest for everybody: providers time out and retry.
//
// The test holds the cancel (a stand-in for a long backlog) and sends an
// ingest of another tenant, to a source with no endpoint at all.
func TestDeleteEndpointDoesNotStallOtherTenantsIngest(t *testing.T) {
	gs := &cancelGatedStore{entered: make(chan struct{}), gate: make(chan struct{})}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { gs.Store = s; return gs }})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gs.gate) }) }
	t.Cleanup(openGate)

	rcv := newReceiver(t)
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "backlogged", "url": rcv.url("acme")}))
	gs.armed.Store(true)
	deleted := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodDelete, "http://"+g.AdminAddr()+"/api/v1/endpoints/backlogged", nil)
		req.Header.Set("Authorization", "Bearer "+acmeToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			deleted <- 0
			return
		}
		resp.Body.Close()
		deleted <- resp.StatusCode
	}()
	select {
	case <-gs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the delete never reached CancelEndpoint")
	}

	ingested := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+g.PublicAddr()+"/ingest/other", "application/json", strings.NewReader(`{"n":1}`))
		if err != nil {
			ingested <- 0
			return
		}
		resp.Body.Close()
		ingested <- resp.StatusCode
	}()
	select {
	case st := <-ingested:
		if st != 202 {
			t.Fatalf("globex ingest: %d", st)
		}
	case <-time.After(5 * time.Second):
		openGate()
		t.Fatalf("globex's ingest (a source with no endpoints) waited >5s for acme's DELETE /endpoints/backlogged to finish cancelling its backlog")
	}
	openGate()
	if st := <-deleted; st != 204 {
		t.Fatalf("delete: %d", st)
	}
}
