package crashtest

import (
	"math/rand/v2"
	"testing"
	"time"

	"hookgate/storage"
)

// TestChecksCatchFailures feeds the crash test's checks with made-up
// outcomes of each kind of bug they exist for, so that a passing crash
// test means something: a check that cannot fail proves nothing.
func TestChecksCatchFailures(t *testing.T) {
	t0 := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	mk := func(n int) *event { return newEvent("unit", n, rng, t0) }
	ok := func(start time.Duration, body string, replayed bool) answer {
		return answer{start: t0.Add(start), end: t0.Add(start + 10*time.Millisecond), status: 202, body: []byte(body), replayed: replayed}
	}
	body := func(ev *event, id string) string { return `{"id":"` + id + `","event_id":"` + ev.msgID + `"}` }
	delivered := func(ev *event, n int) received {
		return received{keys: map[string]int{storage.IdempotencyKey(tenantID, sourceID, ev.msgID): n}, requests: n, delivered: n, body: ev.body}
	}

	cases := []struct {
		name string
		// setup builds the events, what the receiver got and what the
		// store holds.
		setup func() ([]*event, map[string]received, []storedEvent)
		want  string // the finding kind; "" = none
	}{
		{"clean run", func() ([]*event, map[string]received, []storedEvent) {
			ev := mk(1)
			ev.answers = []answer{{start: t0, end: t0}, ok(time.Second, body(ev, "evt_1"), true), ok(2*time.Second, body(ev, "evt_1"), true)}
			return []*event{ev}, map[string]received{ev.testID: delivered(ev, 2)}, []storedEvent{stored(ev, "evt_1", ev.msgID)}
		}, ""},
		{"acknowledged, never delivered", func() ([]*event, map[string]received, []storedEvent) {
			ev := mk(1)
			ev.answers = []answer{ok(0, body(ev, "evt_1"), false)}
			return []*event{ev}, map[string]received{}, []storedEvent{stored(ev, "evt_1", ev.msgID)}
		}, "acknowledged event lost"},
		{"two different answers", func() ([]*event, map[string]received, []storedEvent) {
			ev := mk(1)
			ev.answers = []answer{ok(0, body(ev, "evt_1"), false), ok(0, body(ev, "evt_2"), true)}
			return []*event{ev}, map[string]received{ev.testID: delivered(ev, 1)}, []storedEvent{stored(ev, "evt_1", ev.msgID)}
		}, "double accept: different answers"},
		{"retry after the ack accepted again", func() ([]*event, map[string]received, []storedEvent) {
			ev := mk(1)
			ev.answers = []answer{ok(0, body(ev, "evt_1"), true), ok(time.Second, body(ev, "evt_1"), false)}
			return []*event{ev}, map[string]received{ev.testID: delivered(ev, 1)}, []storedEvent{stored(ev, "evt_1", ev.msgID)}
		}, "double accept: retry not replayed"},
		{"key changes between attempts", func() ([]*event, map[string]received, []storedEvent) {
			ev := mk(1)
			ev.answers = []answer{ok(0, body(ev, "evt_1"), false)}
			rc := delivered(ev, 1)
			rc.keys["msg_other"] = 1
			return []*event{ev}, map[string]received{ev.testID: rc}, []storedEvent{stored(ev, "evt_1", ev.msgID)}
		}, "Idempotency-Key not stable"},
		{"one provider ID stored twice", func() ([]*event, map[string]received, []storedEvent) {
			ev := mk(1)
			ev.answers = []answer{ok(0, body(ev, "evt_1"), false)}
			return []*event{ev}, map[string]received{ev.testID: delivered(ev, 1)},
				[]storedEvent{stored(ev, "evt_1", ev.msgID), stored(ev, "evt_2", ev.msgID)}
		}, "store: double accept"},
		{"acknowledged, not in the store", func() ([]*event, map[string]received, []storedEvent) {
			ev := mk(1)
			ev.answers = []answer{ok(0, body(ev, "evt_1"), false)}
			return []*event{ev}, map[string]received{ev.testID: delivered(ev, 1)}, nil
		}, "store: acknowledged event missing"},
		{"delivery left pending", func() ([]*event, map[string]received, []storedEvent) {
			ev := mk(1)
			ev.answers = []answer{ok(0, body(ev, "evt_1"), false)}
			se := stored(ev, "evt_1", ev.msgID)
			se.Deliveries[0].State = storage.StatePending
			return []*event{ev}, map[string]received{ev.testID: delivered(ev, 1)}, []storedEvent{se}
		}, "store: delivery not succeeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs, got, st := tc.setup()
			rep, f := &report{}, newFindings()
			acked := checkAnswers(evs, rep, f)
			checkReceived(evs, acked, got, rep, f)
			checkStored("store", st, true, evs, acked, got, rep, f)
			if tc.want == "" {
				if len(f.counts) != 0 {
					t.Fatalf("findings on a clean run: %v", f.byKind)
				}
				return
			}
			if f.counts[tc.want] == 0 {
				t.Fatalf("no %q finding; got %v", tc.want, f.byKind)
			}
		})
	}
}

// stored is ev as the store would hold it, with one succeeded delivery.
func stored(ev *event, id, eventID string) storedEvent {
	return storedEvent{ID: id, EventID: eventID, Body: ev.body, Deliveries: []storage.Delivery{{
		ID: "dlv_" + id, Event: id, State: storage.StateSucceeded,
		IdempotencyKey: storage.IdempotencyKey(tenantID, sourceID, eventID),
	}}}
}
