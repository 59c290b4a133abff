package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/storage"
)

// diesBeforeRelease is the real store as a process that dies while
// attempts are in flight leaves it: the claims are never released (the
// graceful shutdown's release is what a crash does not do).
type diesBeforeRelease struct{ storage.Store }

func (diesBeforeRelease) Release(context.Context, []string, time.Time, time.Time) error { return nil }

// A delivery claimed by a process that died is due again at once after a
// restart (the store releases every claim it finds at open: "so they
// resume at once instead of up to a minute later", docs/guarantees.md
// section 1). Open once looked for claims only up to the endpoint's
// *current* timeout + 10 minutes ahead: an operator who lowered the
// timeout of an endpoint whose receiver hangs (PATCH timeout 20m -> 2s)
// while an attempt was in flight under the old 20m30s lease, and whose
// gateway then crashed, got that delivery back only when the old lease
// ended, twenty minutes later; meanwhile it showed "delivering" though
// nothing delivered it, and POST /deliveries/{id}/retry answered 409
// delivery-in-flight.
func TestClaimOfADeadProcessIsReleasedAfterTheEndpointTimeoutWasLowered(t *testing.T) {
	srv, hits, first := hangsFirst(t)

	g := startGateway(t, gwOptions{grace: 300 * time.Millisecond, wrapStore: func(s storage.Store) storage.Store {
		return diesBeforeRelease{s}
	}})
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken,
		jsonMap{"id": "slow", "url": srv.URL + "/hook", "sources": []string{"open"}, "timeout": "20m"}))
	st, _, b := g.post("open", []byte(`{"id":"claimed-at-crash","type":"t"}`), nil)
	if st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the first attempt never reached the receiver")
	}
	// The receiver hangs: the operator lowers the endpoint's timeout.
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/slow", acmeToken, jsonMap{"timeout": "2s"}))

	// The process dies with the attempt in flight, and is started again.
	g = g.restart(gwOptions{grace: 300 * time.Millisecond})
	ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=slow", acmeToken, nil)).Data
	if len(ds) != 1 {
		t.Fatalf("%d deliveries, want 1", len(ds))
	}
	deadline := time.Now().Add(10 * time.Second)
	for hits.Load() < 2 {
		if time.Now().After(deadline) {
			d := must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+ds[0].ID, acmeToken, nil))
			rst, _, rb := g.api("POST", "/deliveries/"+ds[0].ID+"/retry", acmeToken, nil)
			t.Fatalf("10s after the restart the delivery claimed by the dead process was not sent again: state %q; "+
				"POST retry answers %d %s (its claim is only released when the 20m30s lease of the old timeout ends)",
				d.State, rst, fmt.Sprintf("%.120s", rb))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The same without any change by the operator: the dispatcher's lease is
// at least delivery.timeout + 30s for every endpoint (outbound.Config.Lease
// defaults to it), while Open looked only the endpoint's own timeout + 10
// minutes ahead. With delivery.timeout: 20m and an endpoint that overrides
// it with timeout: 5s, every claim of that endpoint lasts 20m30s, and a
// crash left its in-flight deliveries stuck for twenty minutes.
func TestClaimOfADeadProcessIsReleasedWhenTheEndpointTimeoutIsBelowTheDefault(t *testing.T) {
	srv, hits, first := hangsFirst(t)
	opts := gwOptions{
		grace:  100 * time.Millisecond,
		extra:  fmt.Sprintf("endpoints:\n  - {id: quick, tenant: acme, url: %q, timeout: 5s}\n", srv.URL+"/hook"),
		config: func(c *config.Config) { c.Delivery.Timeout = config.Duration(20 * time.Minute) },
	}
	crashing := opts
	crashing.wrapStore = func(s storage.Store) storage.Store { return diesBeforeRelease{s} }
	g := startGateway(t, crashing)
	if st, _, b := g.post("open", []byte(`{"id":"claimed-at-crash","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the first attempt never reached the receiver")
	}
	g = g.restart(opts) // the process died with the attempt in flight
	deadline := time.Now().Add(10 * time.Second)
	for hits.Load() < 2 {
		if time.Now().After(deadline) {
			ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=quick", acmeToken, nil)).Data
			t.Fatalf("10s after the restart the delivery claimed by the dead process was not sent again (%d attempt(s) seen); deliveries: %+v",
				hits.Load(), ds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hangsFirst is a receiver that holds the first request until its attempt
// is cut and answers 200 to the others; first is closed when the first
// arrives, hits counts them all.
func hangsFirst(t *testing.T) (srv *httptest.Server, hits *atomic.Int64, first chan struct{}) {
	t.Helper()
	hits, first = new(atomic.Int64), make(chan struct{})
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if hits.Add(1) == 1 {
			close(first)
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, hits, first
}
