package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
)

// (Kept, passing: no test covered a client gone before the answer.)
// A provider whose connection drops after it sent the whole request (its
// own timeout, a proxy reset) never sees the 202. The event is stored all
// the same, and the provider's retry gets the stored answer (202,
// Idempotent-Replayed, the gateway id of the stored event): never a 422,
// never a second event or a second delivery.
func TestIngestClientGoneBeforeTheAnswerThenRetryIsReplayed(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: endpointA(rcv)})
	body := `{"id":"gone-1","type":"t"}`
	conn, err := net.Dial("tcp", g.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	req := "POST /ingest/open HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: " +
		fmt.Sprint(len(body)) + "\r\n\r\n" + body
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close() // before any answer could have been read
	var stored []storage.Event
	waitFor(t, 10*time.Second, "the event of the abandoned request to be stored", func() bool {
		stored = eventsIn(t, g.Store())
		return len(stored) == 1
	})
	st, hdr, b := g.post("open", []byte(body), nil)
	if st != 202 || hdr.Get(headerReplayed) != "true" {
		t.Fatalf("retry after the dropped connection: %d replayed=%q %s, want 202 replayed", st, hdr.Get(headerReplayed), b)
	}
	var ans map[string]string
	if err := json.Unmarshal(b, &ans); err != nil || ans["id"] != stored[0].ID || ans["event_id"] != "gone-1" {
		t.Fatalf("retry answer %s, want the stored event %s", b, stored[0].ID)
	}
	waitFor(t, 10*time.Second, "one delivery", func() bool { return rcv.count() >= 1 })
	if evs := eventsIn(t, g.Store()); len(evs) != 1 {
		t.Fatalf("%d events after the retry, want 1", len(evs))
	}
	ds, _, err := g.Store().ListDeliveries(t.Context(), storage.DeliveryFilter{Event: stored[0].ID, Limit: 100})
	if err != nil || len(ds) != 1 {
		t.Fatalf("%d deliveries (%v), want 1", len(ds), err)
	}
}

// (Kept, passing: TestIngestScopes covers two tenants, not two sources.)
// Dedupe is per (tenant, source): the same event ID on two sources of one
// tenant is two events, each replayed on its own source only.
func TestIngestSameEventIDOnTwoSourcesOfOneTenant(t *testing.T) {
	g := startGateway(t, gwOptions{extra: `  - id: open2
    tenant: acme
    verify: {scheme: none}
    event_id: json:/id
`})
	first := map[string]string{}
	for _, src := range []string{"open", "open2"} {
		body := []byte(`{"id":"same","src":"` + src + `"}`)
		st, hdr, b := g.post(src, body, nil)
		if st != 202 || hdr.Get(headerReplayed) != "" {
			t.Fatalf("%s: %d %s replayed=%q, want a first 202", src, st, b, hdr.Get(headerReplayed))
		}
		first[src] = string(b)
	}
	if first["open"] == first["open2"] {
		t.Fatalf("both sources got one answer %s", first["open"])
	}
	for _, src := range []string{"open", "open2"} {
		st, hdr, b := g.post(src, []byte(`{"id":"same","src":"`+src+`"}`), nil)
		if st != 202 || hdr.Get(headerReplayed) != "true" || string(b) != first[src] {
			t.Fatalf("%s retry: %d %s replayed=%q, want %s", src, st, b, hdr.Get(headerReplayed), first[src])
		}
	}
	if evs := eventsIn(t, g.Store()); len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
}

// (Kept, passing: the storm tests counted events, not deliveries.)
// Many concurrent sends of one event ID, some with the winning body and
// some with another, to a tenant with endpoints: one event, one delivery
// per endpoint, and each endpoint receives it once.
func TestIngestStormOfOneEventIDMakesOneSetOfDeliveries(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: a, tenant: acme, url: %q}
  - {id: b, tenant: acme, url: %q, max_in_flight: 1}
`, rcv.url("a"), rcv.url("b"))})
	for round := range 10 {
		bodies := [][]byte{fmt.Appendf(nil, `{"id":"st-%d","v":1}`, round), fmt.Appendf(nil, `{"id":"st-%d","v":2}`, round)}
		const n = 24
		codes := make([]int, n)
		answers := make([]string, n)
		replayed := make([]bool, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, hdr, b := g.post("open", bodies[(i/3)%2], nil)
				codes[i], answers[i], replayed[i] = st, string(b), hdr.Get(headerReplayed) == "true"
			}()
		}
		wg.Wait()
		win, fresh := "", 0
		for i := range n {
			switch codes[i] {
			case 202:
				if win == "" {
					win = answers[i]
				}
				if answers[i] != win {
					t.Fatalf("round %d: two different 202 answers %s / %s", round, win, answers[i])
				}
				if !replayed[i] {
					fresh++
				}
			case 422:
			default:
				t.Fatalf("round %d: answer %d %s", round, codes[i], answers[i])
			}
		}
		if fresh != 1 {
			t.Fatalf("round %d: %d answers not marked replayed, want exactly 1", round, fresh)
		}
	}
	evs := eventsIn(t, g.Store())
	if len(evs) != 10 {
		t.Fatalf("%d events, want 10", len(evs))
	}
	waitFor(t, 10*time.Second, "20 deliveries", func() bool { return rcv.count() >= 20 })
	for _, ev := range evs {
		ds, _, err := g.Store().ListDeliveries(t.Context(), storage.DeliveryFilter{Event: ev.ID, Limit: 100})
		if err != nil || len(ds) != 2 {
			t.Fatalf("event %s: %d deliveries (%v), want 2", ev.EventID, len(ds), err)
		}
	}
	if got := rcv.byPath(); got["/a"] != 10 || got["/b"] != 10 {
		t.Fatalf("received %v, want 10 each", got)
	}
}
