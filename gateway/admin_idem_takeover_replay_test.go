package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

// slowFirstReplay is the real store with a short Idempotency-Key lease
// and a first CreateReplay that waits for the test: a POST /replays that
// outlives its key's lease, whose retry takes the key over meanwhile.
type slowFirstReplay struct {
	shortLease
	puts    atomic.Int32
	jobID   atomic.Value // string
	inPut   chan struct{}
	gate    chan struct{}
	secondW chan struct{} // closed once the retry's CreateReplay is written
}

func (s *slowFirstReplay) CreateReplay(ctx context.Context, j *storage.ReplayJob) error {
	switch s.puts.Add(1) {
	case 1:
		s.jobID.Store(j.ID)
		close(s.inPut)
		<-s.gate
	case 2:
		err := s.Store.CreateReplay(ctx, j)
		close(s.secondW)
		return err
	}
	return s.Store.CreateReplay(ctx, j)
}

// TestBulkReplayRetryTakingOverASlowFirstRunReplaysOnce: a POST /replays
// under an Idempotency-Key derives its job id from the key's use, so that
// a run again finds the first run's job instead of replaying every event a
// second time. When the first run outlives its lease (its job write slow)
// and the retry takes the key over, both may look for the job before
// either writes it: the job is created once (Store.CreateReplay), and the
// later writer answers with the job the other made. (Both wrote it; the
// first run's write landed over the retry's finished job, and the job ran
// again from the start: every matched event delivered once more.)
func TestBulkReplayRetryTakingOverASlowFirstRunReplaysOnce(t *testing.T) {
	rcv := newReceiver(t)
	st := &slowFirstReplay{shortLease: shortLease{lease: 300 * time.Millisecond}, inPut: make(chan struct{}), gate: make(chan struct{}), secondW: make(chan struct{})}
	g := startGateway(t, gwOptions{
		extra:     fmt.Sprintf("endpoints:\n  - {id: r1, tenant: acme, url: %q, sources: [open]}\n", rcv.url("r1")),
		wrapStore: func(s storage.Store) storage.Store { st.Store = s; return st },
	})
	var once sync.Once
	release := func() { once.Do(func() { close(st.gate) }) }
	t.Cleanup(release)

	if s, _, b := g.post("open", []byte(`{"id":"rp-1","type":"t"}`), nil); s != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", s, b)
	}
	waitFor(t, 10*time.Second, "the first delivery", func() bool { return rcv.count() == 1 })

	post := func() (int, string) {
		req, _ := http.NewRequest("POST", "http://"+g.AdminAddr()+"/api/v1/replays", strings.NewReader(`{"source":"open"}`))
		req.Header.Set("Authorization", "Bearer "+acmeToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "slow-replay")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	first := make(chan string, 1)
	go func() { s, b := post(); first <- fmt.Sprint(s, " ", b) }()
	select {
	case <-st.inPut:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run never reached its job write")
	}
	leaseEnd := time.Now().Add(st.lease + 50*time.Millisecond)
	waitFor(t, 5*time.Second, "the first run's lease to end", func() bool { return time.Now().After(leaseEnd) })
	if s, b := post(); s != http.StatusAccepted {
		t.Fatalf("retry after the lease: %d %s", s, b)
	}
	<-st.secondW
	id := st.jobID.Load().(string)
	done := func() bool {
		j, err := g.Store().GetReplay(context.Background(), id)
		return err == nil && j.State != storage.ReplayRunning
	}
	waitFor(t, 10*time.Second, "the retry's job to finish", done)
	waitFor(t, 10*time.Second, "the replayed delivery", func() bool { return rcv.count() == 2 })
	release()
	t.Logf("first run answered %s", <-first)
	waitFor(t, 10*time.Second, "the job to finish", done)
	// The job is done: every delivery it made is in the store.
	evs := eventsIn(t, g.Store())
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	if ds := deliveriesOf(t, g.Store(), evs[0].ID); len(ds) != 2 {
		t.Fatalf("the event has %d deliveries: the ingest's and one per run of the bulk replay; want 2 (one replay job, run once)", len(ds))
	}
}
