package gateway

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

// unreadableCatalog is the real store whose catalog reads fail while on.
type unreadableCatalog struct {
	storage.Store
	on atomic.Bool
}

func (u *unreadableCatalog) ListEndpoints(ctx context.Context) ([]storage.Endpoint, error) {
	if u.on.Load() {
		return nil, errInjected
	}
	return u.Store.ListEndpoints(ctx)
}

// A reload of the sources and endpoints that failed after a change (the
// store could not be read just then) is done again by the store check
// once the store reads again. The endpoint a DELETE removed from the store
// stayed in memory, getting a delivery of every new event, until the next
// change through the admin API.
func TestFailedRegistryReloadIsDoneAgain(t *testing.T) {
	d := storeCheckEvery
	t.Cleanup(func() { storeCheckEvery = d }) // after the gateway's: registered before it
	storeCheckEvery = 20 * time.Millisecond
	rcv := newReceiver(t)
	uc := &unreadableCatalog{}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { uc.Store = s; return uc }})
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "gone", "url": rcv.url("gone")}))
	uc.on.Store(true)
	if st, _, b := g.api("DELETE", "/endpoints/gone", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	uc.on.Store(false)
	// Each new event is delivered to the endpoints in memory.
	n := 0
	waitFor(t, 10*time.Second, "an event that the deleted endpoint does not get", func() bool {
		n++
		id := fmt.Sprintf("after-delete-%d", n)
		if st, _, b := g.post("open", []byte(`{"id":"`+id+`","type":"t"}`), nil); st != 202 {
			t.Fatalf("ingest: %d %s", st, b)
		}
		evs := must[apiList[eventView]](t, 200)(g.api("GET", "/events?limit=1", acmeToken, nil)).Data
		return len(evs) == 1 && evs[0].EventID == id && len(deliveriesOf(t, g.Store(), evs[0].ID)) == 0
	})
}

// An endpoint whose create was stored but reported failed (503: a timeout
// after the write) is in the store, so it gets deliveries too, from the
// next store check on: it was left out of memory until another change.
func TestAmbiguousCatalogWriteIsReloaded(t *testing.T) {
	d := storeCheckEvery
	t.Cleanup(func() { storeCheckEvery = d }) // after the gateway's: registered before it
	storeCheckEvery = 20 * time.Millisecond
	rcv := newReceiver(t)
	g, fs := startFaulty(t, "")
	fs.set(faultAfter, "PutEndpoint")
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "stored", "url": rcv.url("stored")})
	want503(t, "endpoint write reported failed", st, hdr, b)
	fs.set(faultNone, "PutEndpoint")
	n := 0
	waitFor(t, 10*time.Second, "a delivery to the stored endpoint", func() bool {
		n++
		ingestN(t, g, fmt.Sprintf("after-ambiguous-%d-", n), 1)
		return rcv.byPath()["/stored"] >= 1
	})
}
