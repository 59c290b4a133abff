package gateway

import (
	"fmt"
	"sync"
	"testing"

	"hookgate/storage"
)

// Concurrent first sends of one event ID with two different bodies (a
// provider that re-serialised the event between two deliveries): one body
// wins, exactly one event is stored, every answer to the winning body is
// the first 202 and every answer to the other is 422.
func TestConcurrentSameIDDifferentBodiesStoreOneEvent(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: endpointA(rcv)})
	for round := range 20 {
		bodies := [][]byte{fmt.Appendf(nil, `{"id":"race-%d","v":1}`, round), fmt.Appendf(nil, `{"id":"race-%d","v":2}`, round)}
		const n = 16
		codes := make([]int, n)
		answers := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, _, b := g.post("open", bodies[i%2], nil)
				codes[i], answers[i] = st, string(b)
			}()
		}
		wg.Wait()
		winner := -1
		for i := range n {
			if codes[i] == 202 {
				if winner >= 0 && (winner%2 != i%2 || answers[i] != answers[winner]) {
					t.Fatalf("round %d: both bodies accepted or answers differ: %d %s / %d %s", round, winner, answers[winner], i, answers[i])
				}
				winner = i
			} else if codes[i] != 422 {
				t.Fatalf("round %d: request %d: %d %s", round, i, codes[i], answers[i])
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no request accepted: %v", round, codes)
		}
		for i := range n {
			if i%2 == winner%2 && codes[i] != 202 {
				t.Fatalf("round %d: request %d with the winning body got %d %s", round, i, codes[i], answers[i])
			}
		}
	}
	evs, _, err := g.Store().ListEvents(t.Context(), storage.EventFilter{Limit: 1000})
	if err != nil || len(evs) != 20 {
		t.Fatalf("%d events stored (%v), want 20", len(evs), err)
	}
}
