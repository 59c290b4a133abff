package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/internal/testsupport"
	"hookgate/storage"
	"hookgate/storage/badger"
)

// Reloads race: each admin change and each 410 reloads the registry. A
// reload that read the store before a change must not publish its list to
// the dispatcher after the reload that read the change: the dispatcher
// would keep the older list (a deleted endpoint still claimed, a new one
// never started) until the next change. So a reload publishes while it
// still holds the lock the next reload must take.
func TestReloadsPublishInOrder(t *testing.T) {
	db, err := badger.Open(t.TempDir(), badger.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	reg := newRegistry(db, slog.New(slog.DiscardHandler))

	var last []storage.Endpoint
	published := 0
	publish := func(s *snapshot) {
		if reg.mu.TryLock() {
			reg.mu.Unlock()
			t.Error("published outside the reload lock: a newer reload could publish first")
		}
		last = s.endpoints
		published++
	}
	if _, err := reg.reload(ctx, publish); err != nil {
		t.Fatal(err)
	}
	ep := &storage.Endpoint{ID: "ep-new", Tenant: "acme", URL: "https://example.com/hook", CreatedAt: time.Now()}
	if err := db.PutEndpoint(ctx, ep); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.reload(ctx, publish); err != nil {
		t.Fatal(err)
	}
	if published != 2 || len(last) != 1 || last[0].ID != "ep-new" {
		t.Fatalf("published %d times, last %v; want 2, the last with ep-new", published, last)
	}
}

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
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "gone", "url": rcv.url("gone")}))
	uc.on.Store(true)
	if st, _, b := g.api("DELETE", "/endpoints/gone", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	uc.on.Store(false)
	// Each new event is delivered to the endpoints in memory.
	n := 0
	testsupport.WaitFor(t, 10*time.Second, "an event that the deleted endpoint does not get", func() bool {
		n++
		id := fmt.Sprintf("after-delete-%d", n)
		if st, _, b := g.post("open", []byte(`{"id":"`+id+`","type":"t"}`), nil); st != 202 {
			t.Fatalf("ingest: %d %s", st, b)
		}
		evs := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?limit=1", acmeToken, nil)).Data
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
	testsupport.WaitFor(t, 10*time.Second, "a delivery to the stored endpoint", func() bool {
		n++
		ingestN(t, g, fmt.Sprintf("after-ambiguous-%d-", n), 1)
		return rcv.byPath()["/stored"] >= 1
	})
}

// gatedCatalog is the faulty store whose ListEndpoints, once armed, fails
// on its first call and, on its second, reads the catalog and then waits
// for release before returning what it read: a reload that has read the
// catalog but not yet published it.
type gatedCatalog struct {
	*faultyStore
	armed   atomic.Bool
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (g *gatedCatalog) ListEndpoints(ctx context.Context) ([]storage.Endpoint, error) {
	if !g.armed.Load() {
		return g.faultyStore.ListEndpoints(ctx)
	}
	switch g.calls.Add(1) {
	case 1:
		return nil, errInjected
	case 2:
		eps, err := g.faultyStore.ListEndpoints(ctx)
		close(g.entered)
		<-g.release
		return eps, err
	}
	return g.faultyStore.ListEndpoints(ctx)
}

// A catalog write reported failed but stored (the case catalogError marks
// the registry stale for) while the store check's reload of an earlier
// failed reload is between reading the catalog and clearing
// registryStale: that reload cleared the mark set after it had read, so
// the stored endpoint was never loaded and never got a delivery (until the
// next admin change or a restart).
func TestStaleMarkSetDuringAReloadIsNotLost(t *testing.T) {
	d := storeCheckEvery
	t.Cleanup(func() { storeCheckEvery = d })
	storeCheckEvery = 20 * time.Millisecond
	rcv := newReceiver(t)
	gc := &gatedCatalog{entered: make(chan struct{}), release: make(chan struct{})}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store {
		gc.faultyStore = newFaultyStore(s)
		return gc
	}})
	released := false
	t.Cleanup(func() {
		if !released {
			close(gc.release)
		}
	})

	// A change whose reload fails: the registry is marked stale.
	gc.armed.Store(true)
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "first", "url": rcv.url("first")}))
	// The store check reloads it: it has read the catalog...
	select {
	case <-gc.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the store check did not reload the stale registry")
	}
	// ...when a catalog write is stored but reported failed.
	gc.faultyStore.set(faultAfter, "PutEndpoint")
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "late", "url": rcv.url("late")})
	want503(t, "endpoint write reported failed", st, hdr, b)
	gc.faultyStore.set(faultNone, "PutEndpoint")
	close(gc.release)
	released = true

	// The stored endpoint gets deliveries once a store check reloads.
	n := 0
	testsupport.WaitFor(t, 5*time.Second, "a delivery to the endpoint whose write was reported failed", func() bool {
		n++
		ingestN(t, g, fmt.Sprintf("stale-race-%d-", n), 1)
		return rcv.byPath()["/late"] >= 1
	})
	if rcv.byPath()["/first"] == 0 {
		t.Fatal("the first endpoint got nothing either")
	}
}
