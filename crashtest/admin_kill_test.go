package crashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
	"hookgate/storage/badger"
)

// countingReceiver answers 200 (after delay, when set) and counts the requests
// per Idempotency-Key.
type countingReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	byKey map[string]int
	delay time.Duration
	hit   chan string
}

func newCountingReceiver(t *testing.T, delay time.Duration) *countingReceiver {
	t.Helper()
	r := &countingReceiver{byKey: map[string]int{}, delay: delay, hit: make(chan string, 1<<16)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		key := req.Header.Get("Idempotency-Key")
		select {
		case r.hit <- key:
		default:
		}
		if r.delay > 0 {
			select {
			case <-time.After(r.delay):
			case <-req.Context().Done():
				return
			}
		}
		r.mu.Lock()
		r.byKey[key]++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *countingReceiver) keys() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.byKey))
	for k, n := range r.byKey {
		out[k] = n
	}
	return out
}

// adminCall sends an admin API request with the operator token.
func adminCall(c *http.Client, method, url string, body any, hdr map[string]string) (int, []byte, http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}

// publishEvents publishes n events (event ids prefix00000, prefix00001,
// ...) through POST /events with a few workers.
func publishEvents(t *testing.T, sup *supervisor, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events",
					map[string]any{"source": sourceID, "type": "t", "event_id": fmt.Sprintf("%s%05d", prefix, i),
						"payload": map[string]any{"n": i}}, nil)
				if err == nil && st != http.StatusAccepted {
					err = fmt.Errorf("publish %d: %d %s", i, st, b)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// startWithReceiver starts the binary with the test config, delivering
// to a new counting receiver that answers at once.
func startWithReceiver(t *testing.T) (*countingReceiver, *supervisor) {
	t.Helper()
	rc := newCountingReceiver(t, 0)
	sup := newSupervisor(t, buildBinary(t), rc.srv.URL)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	return rc, sup
}

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type replayJob struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Matched  int    `json:"matched"`
	Enqueued int    `json:"enqueued"`
}

func getReplay(sup *supervisor, id string) (replayJob, error) {
	var j replayJob
	st, b, _, err := adminCall(sup.client, http.MethodGet, sup.adminURL+"/api/v1/replays/"+id, nil, nil)
	if err != nil {
		return j, err
	}
	if st != http.StatusOK {
		return j, fmt.Errorf("GET replay: %d %s", st, b)
	}
	return j, json.Unmarshal(b, &j)
}

// storedDeliveries opens the stopped gateway's store and counts every
// event's deliveries.
func storedDeliveries(t *testing.T, dir string) map[string][]storage.Delivery {
	t.Helper()
	db, err := badger.Open(dir, badger.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	out := map[string][]storage.Delivery{}
	for cursor := ""; ; {
		evs, next, err := db.ListEvents(ctx, storage.EventFilter{Limit: badger.MaxLimit, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			for dc := ""; ; {
				ds, more, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Event: ev.ID, Limit: badger.MaxLimit, Cursor: dc})
				if err != nil {
					t.Fatal(err)
				}
				out[ev.EventID] = append(out[ev.EventID], ds...)
				if more == "" {
					break
				}
				dc = more
			}
		}
		if next == "" {
			return out
		}
		cursor = next
	}
}

// A bulk replay (POST /replays) of N events to the one endpoint, while the
// process is SIGKILLed at random moments and restarted: the job resumes
// from its stored progress, each event ends with exactly one replayed
// delivery (two in all with the original), and the job's matched and
// enqueued say N. A step's deliveries and the job's progress were two
// writes: a kill between them made the resumed job enqueue the batch again
// (100-700 events of 4000 had two copies, with the counts saying 4000).
func TestKillDuringBulkReplayEnqueuesEachEventOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const n = 4000
	const kills = 8
	rc, sup := startWithReceiver(t)
	publishEvents(t, sup, "e", n)
	waitUntil(t, 60*time.Second, "the original deliveries", func() bool { return len(rc.keys()) == n })

	st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/replays", map[string]any{"source": sourceID}, nil)
	if err != nil || st != http.StatusAccepted {
		t.Fatalf("POST /replays: %d %s %v", st, b, err)
	}
	var job replayJob
	if err := json.Unmarshal(b, &job); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 16))
	t.Logf("seed %d", seed)
	done := 0
	for k := 0; k < kills; k++ {
		// Kill at a random moment while the job is still running.
		time.Sleep(time.Duration(rng.IntN(25)) * time.Millisecond)
		j, err := getReplay(sup, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != "running" {
			break
		}
		if err := sup.kill(); err != nil {
			t.Fatal(err)
		}
		done++
		if err := sup.start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d kills during the replay", done)
	var final replayJob
	waitUntil(t, 60*time.Second, "the replay to complete", func() bool {
		j, err := getReplay(sup, job.ID)
		final = j
		return err == nil && j.State != "running"
	})
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
	byEvent := storedDeliveries(t, sup.dataDir)
	twice, total := 0, 0
	var example string
	for id, ds := range byEvent {
		total += len(ds)
		if len(ds) != 2 {
			twice++
			if example == "" {
				example = fmt.Sprintf("event %s has %d deliveries", id, len(ds))
			}
		}
	}
	if len(byEvent) != n {
		t.Errorf("store has %d events, want %d", len(byEvent), n)
	}
	if final.State != "completed" || final.Matched != n || final.Enqueued != total-n {
		t.Errorf("replay job says %s, matched %d, enqueued %d; the store has %d replayed deliveries for %d events",
			final.State, final.Matched, final.Enqueued, total-n, n)
	}
	if twice > 0 {
		t.Errorf("%d of %d events do not have exactly one replayed delivery after %d kills (%s): a batch was enqueued again on resume",
			twice, n, done, example)
	}
}

// endpointDeliveries is how many deliveries of endpoint ep are in state (one page of
// up to 1000).
func endpointDeliveries(t *testing.T, sup *supervisor, ep, state string) int {
	t.Helper()
	st, b, _, err := adminCall(sup.client, http.MethodGet,
		sup.adminURL+"/api/v1/deliveries?limit=1000&endpoint="+ep+"&status="+state, nil, nil)
	if err != nil || st != http.StatusOK {
		t.Fatalf("GET /deliveries: %d %s %v", st, b, err)
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	return len(list.Data)
}

// DELETE /endpoints/{id} of an endpoint with a backlog of thousands of
// deliveries (some in flight to a slow receiver), SIGKILLed while its
// backlog is being cancelled: after the restart (and the client's retry
// of the DELETE when the kill came before the delete itself), every
// delivery of the deleted endpoint ends cancelled, none stays pending or
// delivering, the id can be created again, and the new endpoint gets none
// of the old deliveries.
func TestKillDuringEndpointDeleteCancelsItsBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const n = 5000
	fast := newCountingReceiver(t, 0)
	slow := newCountingReceiver(t, 5*time.Second)
	sup := newSupervisor(t, buildBinary(t), fast.srv.URL)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/endpoints", map[string]any{
		"id": "doomed", "tenant": tenantID, "url": slow.srv.URL, "timeout": "10s", "max_in_flight": 8,
		"retry": map[string]any{"initial_interval": "1h", "max_interval": "1h", "max_elapsed": "2h"},
	}, nil)
	if err != nil || st != http.StatusCreated {
		t.Fatalf("POST /endpoints: %d %s %v", st, b, err)
	}
	publishEvents(t, sup, "e", n)
	waitUntil(t, 30*time.Second, "attempts in flight to doomed", func() bool { return endpointDeliveries(t, sup, "doomed", "delivering") > 0 })

	go func() {
		_, _, _, _ = adminCall(sup.client, http.MethodDelete, sup.adminURL+"/api/v1/endpoints/doomed", nil, nil)
	}()
	time.Sleep(time.Duration(20+rand.IntN(150)) * time.Millisecond)
	if err := sup.kill(); err != nil {
		t.Fatal(err)
	}
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	if st, _, _, _ := adminCall(sup.client, http.MethodGet, sup.adminURL+"/api/v1/endpoints/doomed", nil, nil); st == http.StatusOK {
		t.Log("the kill came before the delete: the client retries it")
		if st, b, _, err := adminCall(sup.client, http.MethodDelete, sup.adminURL+"/api/v1/endpoints/doomed", nil, nil); err != nil || st != http.StatusNoContent {
			t.Fatalf("DELETE again: %d %s %v", st, b, err)
		}
	}
	waitUntil(t, 30*time.Second, "the backlog of the deleted endpoint to be cancelled", func() bool {
		return endpointDeliveries(t, sup, "doomed", "pending") == 0 && endpointDeliveries(t, sup, "doomed", "delivering") == 0
	})
	fresh := newCountingReceiver(t, 0)
	waitUntil(t, 30*time.Second, "the id to be free again", func() bool {
		st, _, _, _ := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/endpoints", map[string]any{
			"id": "doomed", "tenant": tenantID, "url": fresh.srv.URL}, nil)
		return st == http.StatusCreated
	})
	// One new event: the new endpoint gets it, and nothing older.
	st, b, _, err = adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events",
		map[string]any{"source": sourceID, "type": "t", "event_id": "after", "payload": map[string]any{"n": -1}}, nil)
	if err != nil || st != http.StatusAccepted {
		t.Fatalf("publish: %d %s %v", st, b, err)
	}
	waitUntil(t, 30*time.Second, "the new event at the new endpoint", func() bool { return len(fresh.keys()) >= 1 })
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
	if got := fresh.keys(); len(got) != 1 {
		t.Errorf("the endpoint created again got %d distinct events, want only the new one", len(got))
	}
	live := 0
	for _, ds := range storedDeliveries(t, sup.dataDir) {
		for _, d := range ds {
			if d.Endpoint == "doomed" && !d.State.Terminal() {
				live++
			}
		}
	}
	if live != 0 {
		t.Errorf("%d deliveries of endpoint id doomed still live in the store", live)
	}
}
