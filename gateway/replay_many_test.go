package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A bulk replay wrote the deliveries of a whole batch (100 events) in one
// store transaction ( in an earlier version). For a tenant with ~150 subscribed
// endpoints that is 15,000 deliveries, more than one Badger transaction
// holds: every such replay ended "failed" after enqueueing nothing.
func TestReplayToManyEndpoints(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // hold every attempt: the test needs the replay, not the sends
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	g := startGateway(t, gwOptions{})
	ingestN(t, g, "many", 100)
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for i := range 150 {
		fmt.Fprintf(&b, "  - {id: ep%03d, tenant: acme, url: %q, max_in_flight: 1}\n", i, srv.URL+"/")
	}
	g = g.restart(gwOptions{extra: b.String(), grace: 100 * time.Millisecond})
	t.Cleanup(func() { close(stop) })
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.State != "completed" || job.Enqueued != 100*150 {
		var cause string
		for _, l := range strings.Split(g.logs.String(), "\n") {
			if strings.Contains(l, "replay failed") {
				cause = l
			}
		}
		t.Fatalf("bulk replay of 100 events to 150 endpoints: state %s, matched %d, enqueued %d, error %q; log: %s",
			job.State, job.Matched, job.Enqueued, job.Error, cause)
	}
}
