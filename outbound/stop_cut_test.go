package outbound

import (
	"net/http"
	"testing"
	"time"

	"hookgate/storage"
)

// An attempt a shutdown abandons after its grace is cut on the wire too:
// the receiver's request ends (its context is done) when Stop returns,
// not when the process exits, so a receiver that is still working learns
// that its answer will not be read, and the connection is not left open.
func TestStopAfterGraceEndsTheReceiversRequest(t *testing.T) {
	db, _ := openDB(t)
	ended := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-r.Context().Done():
			close(ended)
		case <-time.After(time.Minute):
		}
	})
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.Timeout = time.Minute })
	accept(t, db, event{}, ep)
	d := startDispatcher(t, db, Config{}, ep)
	d.Notify()
	waitFor(t, wait, "the attempt to start", func() bool { return rc.inFlight() == 1 })
	d.Stop(50 * time.Millisecond)
	select {
	case <-ended:
	case <-time.After(wait):
		t.Fatalf("the receiver's request was still open %v after Stop returned", wait)
	}
}
