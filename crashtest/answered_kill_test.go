package crashtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

type seenReq struct {
	key, whID, attempt, path string
}

// The receiver answers 200 (flushed) to deliveries and the gateway is
// SIGKILLed right after the first answers, before it can store all the
// outcomes: after the restart every event ends succeeded exactly once per
// delivery, every redelivery carries the same Idempotency-Key and
// webhook-id as before, no delivery is sent more than twice (one lost
// outcome), and each delivery's stored attempts are numbered 1..n with
// attempt_count n and the last one the 2xx; the hookgate-attempt header
// of the final request matches the stored n of the success.
func TestKillAfterReceiverAnsweredBeforeOutcomeStored(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const n = 300
	var mu sync.Mutex
	seen := map[string][]seenReq{} // by test id (body)
	first := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var p struct {
			Data struct {
				TestID string `json:"test_id"`
			} `json:"data"`
		}
		_ = json.Unmarshal(b, &p)
		mu.Lock()
		seen[p.Data.TestID] = append(seen[p.Data.TestID], seenReq{r.Header.Get("Idempotency-Key"), r.Header.Get("webhook-id"), r.Header.Get("hookgate-attempt"), r.URL.Path})
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		select {
		case first <- struct{}{}:
		default:
		}
	}))
	defer srv.Close()
	sup := newSupervisor(t, buildBinary(t), srv.URL)
	// Start with the endpoint absent from delivery: publish with the
	// receiver up, kill on the first answer.
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		ids[i] = fmt.Sprintf("ans%04d", i)
	}
	next := make(chan string)
	for range 16 {
		wg.Go(func() {
			for id := range next {
				_, _, _, _ = adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events",
					map[string]any{"source": sourceID, "type": "t", "event_id": id, "payload": map[string]any{"type": "t", "data": map[string]any{"test_id": id}}}, nil)
			}
		})
	}
	go func() {
		for _, id := range ids {
			next <- id
		}
		close(next)
	}()
	<-first
	// a few more answers in flight
	waitUntil(t, 10*time.Second, "some answers", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= 20 })
	if err := sup.kill(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	// Publish the rest again (those the kill cut): dedupe answers the others.
	for _, id := range ids {
		st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events",
			map[string]any{"source": sourceID, "type": "t", "event_id": id, "payload": map[string]any{"type": "t", "data": map[string]any{"test_id": id}}}, nil)
		if err != nil || st != http.StatusAccepted {
			t.Fatalf("publish %s again: %d %s %v", id, st, b, err)
		}
	}
	waitUntil(t, 30*time.Second, "every delivery succeeded", func() bool {
		return endpointDeliveries(t, sup, endpointID, "succeeded") == n
	})
	st, b, _, err := adminCall(sup.client, http.MethodGet, sup.adminURL+"/api/v1/deliveries?limit=1000&endpoint="+endpointID, nil, nil)
	if err != nil || st != 200 {
		t.Fatal(st, err)
	}
	var list struct{ Data []deliveryJSON }
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Data) != n {
		t.Fatalf("%d deliveries, want %d", len(list.Data), n)
	}
	mu.Lock()
	defer mu.Unlock()
	redelivered, bad := 0, 0
	report := func(format string, args ...any) {
		bad++
		if bad <= 8 {
			t.Errorf(format, args...)
		}
	}
	for _, d := range list.Data {
		st, b, _, err := adminCall(sup.client, http.MethodGet, sup.adminURL+"/api/v1/deliveries/"+d.ID, nil, nil)
		var full deliveryJSON
		if err != nil || st != 200 || json.Unmarshal(b, &full) != nil {
			t.Fatalf("GET delivery: %d %v", st, err)
		}
		// find the test id via the key
		var reqs []seenReq
		for _, rs := range seen {
			if len(rs) > 0 && rs[0].key == full.IdempotencyKey {
				reqs = rs
			}
		}
		if len(reqs) == 0 {
			report("delivery %s (key %s) succeeded but the receiver never saw it", d.ID, full.IdempotencyKey)
			continue
		}
		if len(reqs) > 1 {
			redelivered++
		}
		if len(reqs) > 2 {
			report("delivery %s sent %d times: %+v", d.ID, len(reqs), reqs)
		}
		for _, r := range reqs {
			if r.key != full.IdempotencyKey || r.whID != full.IdempotencyKey {
				report("delivery %s: request with key %q webhook-id %q, stored key %q", d.ID, r.key, r.whID, full.IdempotencyKey)
			}
		}
		if full.AttemptCount != len(full.Attempts) {
			report("delivery %s: attempt_count %d but %d attempts listed", d.ID, full.AttemptCount, len(full.Attempts))
		}
		for i, a := range full.Attempts {
			if a.N != i+1 {
				report("delivery %s: attempts numbered %+v", d.ID, full.Attempts)
				break
			}
		}
		if k := len(full.Attempts); k > 0 {
			last := full.Attempts[k-1]
			if last.StatusCode/100 != 2 {
				report("delivery %s succeeded but its last attempt is %+v", d.ID, last)
			}
			if got := reqs[len(reqs)-1].attempt; got != strconv.Itoa(last.N) {
				report("delivery %s: final request said hookgate-attempt %s, stored success is attempt %d (attempts %+v, requests %+v)", d.ID, got, last.N, full.Attempts, reqs)
			}
		}
	}
	t.Logf("%d deliveries sent again after the kill", redelivered)
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
}

type deliveryJSON struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
	State          string `json:"state"`
	AttemptCount   int    `json:"attempt_count"`
	Attempts       []struct {
		N          int    `json:"n"`
		StatusCode int    `json:"status_code"`
		Error      string `json:"error"`
	} `json:"attempts"`
}
