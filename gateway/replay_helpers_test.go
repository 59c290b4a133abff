package gateway

import (
	"fmt"
	"testing"
	"time"

	"hookgate/storage"
)

// endpointA is config for one endpoint "a" of tenant acme on rcv.
func endpointA(rcv *receiver) string {
	return fmt.Sprintf("endpoints:\n  - {id: a, tenant: acme, url: %q}\n", rcv.url("a"))
}

// startWrapped starts a gateway with endpoint "a" on rcv over a store that
// wrap wraps (wrap returns the wrapper after keeping the real store).
func startWrapped(t *testing.T, rcv *receiver, wrap func(storage.Store) storage.Store) *gw {
	t.Helper()
	return startGateway(t, gwOptions{extra: endpointA(rcv), wrapStore: wrap})
}

// replayChoosing starts a gateway with endpoints "a" (config) and "b"
// (admin API) on rcv, ingests 3 events and, once they are delivered,
// a bulk replay by status whose choice of targets is held in bs until
// bs.release is closed. It returns when the replay is choosing.
func replayChoosing(t *testing.T, rcv *receiver, bs *blockEventListings, prefix string) (*gw, replayView) {
	t.Helper()
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store { bs.Store = s; return bs })
	must[endpointView](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{"id": "b", "tenant": "acme", "url": rcv.url("b")}))
	ingestN(t, g, prefix, 3)
	waitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 6 })
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open", "status": "succeeded"}))
	<-bs.entered
	return g, job
}
