package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/gateway/problem"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
	"hookgate/storage"
)

func decodeProblem(t *testing.T, hdr map[string][]string, body []byte) problem.Details {
	t.Helper()
	if ct := strings.Join(hdr["Content-Type"], ""); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json (body %s)", ct, body)
	}
	var p problem.Details
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body %s: %v", body, err)
	}
	return p
}

func TestIngestFirstThenReplay(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := []byte(`{"id":"evt_1","type":"invoice.paid","amount":42}`)
	st, hdr, first := g.post("open", body, nil)
	if st != 202 {
		t.Fatalf("first: %d %s", st, first)
	}
	var raw map[string]string
	if err := json.Unmarshal(first, &raw); err != nil {
		t.Fatal(err)
	}
	id := raw["id"]
	if !strings.HasPrefix(id, "evt_") || raw["event_id"] != "evt_1" || len(raw) != 2 {
		t.Fatalf("answer %s", first)
	}
	if hdr.Get(inbound.HeaderReplayed) != "" {
		t.Fatal("first answer marked as replayed")
	}
	st, hdr, again := g.post("open", body, nil)
	if st != 202 || string(again) != string(first) || hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %q replayed=%q, want 202 %q", st, again, hdr.Get(inbound.HeaderReplayed), first)
	}
	ev, err := g.Store().GetEvent(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if string(ev.Body) != string(body) || ev.Type != "invoice.paid" || ev.ContentType != "application/json" || ev.Source != "open" || ev.Tenant != "acme" {
		t.Fatalf("stored event %+v", ev)
	}
	evs, _, _ := g.Store().ListEvents(context.Background(), storage.EventFilter{})
	if len(evs) != 1 {
		t.Fatalf("%d events stored, want 1", len(evs))
	}
}

func TestIngestSameIDDifferentBody(t *testing.T) {
	g := startGateway(t, gwOptions{})
	if st, _, b := g.post("open", []byte(`{"id":"x","v":1}`), nil); st != 202 {
		t.Fatalf("first: %d %s", st, b)
	}
	st, hdr, b := g.post("open", []byte(`{"id":"x","v":2}`), nil)
	if st != 422 {
		t.Fatalf("different body: %d %s", st, b)
	}
	if p := decodeProblem(t, hdr, b); !strings.HasSuffix(p.Type, "idempotency-key-reused") || p.Status != 422 {
		t.Fatalf("problem %+v", p)
	}
}

func TestIngestScopes(t *testing.T) {
	g := startGateway(t, gwOptions{})
	// The same provider ID in two tenants (open: acme, other: globex) is two events.
	for _, src := range []string{"open", "other"} {
		if st, hdr, b := g.post(src, []byte(`{"id":"shared","src":"`+src+`"}`), map[string]string{"Idempotency-Key": "shared"}); st != 202 || hdr.Get(inbound.HeaderReplayed) != "" {
			t.Fatalf("%s: %d %s replayed=%q", src, st, b, hdr.Get(inbound.HeaderReplayed))
		}
	}
}

func TestIngestConcurrentIdentical(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := []byte(`{"id":"storm","type":"t"}`)
	const n = 64
	answers := make([]string, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, _, b := g.post("open", body, nil)
			codes[i], answers[i] = st, string(b)
		}()
	}
	wg.Wait()
	for i := range n {
		if codes[i] != 202 || answers[i] != answers[0] {
			t.Fatalf("request %d: %d %s, want 202 %s", i, codes[i], answers[i], answers[0])
		}
	}
	evs, _, err := g.Store().ListEvents(context.Background(), storage.EventFilter{})
	if err != nil || len(evs) != 1 {
		t.Fatalf("%d events stored (%v), want exactly 1", len(evs), err)
	}
}

func TestIngestAnswerSurvivesRestart(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := []byte(`{"id":"durable"}`)
	_, _, first := g.post("open", body, nil)
	g = g.restart(gwOptions{})
	st, hdr, again := g.post("open", body, nil)
	if st != 202 || string(again) != string(first) || hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("after restart: %d %s, want the first answer %s", st, again, first)
	}
}

func TestIngestDedupeExpires(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gwOptions{ttl: "1s"})
	if st, _, b := g.post("open", []byte(`{"id":"ttl","v":1}`), nil); st != 202 {
		t.Fatalf("first: %d %s", st, b)
	}
	// Once the window has passed, the same ID with another body is a new event.
	testsupport.WaitFor(t, 10*time.Second, "the dedupe record to expire", func() bool {
		st, hdr, _ := g.post("open", []byte(`{"id":"ttl","v":2}`), nil)
		return st == 202 && hdr.Get(inbound.HeaderReplayed) == ""
	})
	evs, _, _ := g.Store().ListEvents(context.Background(), storage.EventFilter{})
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
}

func TestIngestSignature(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := []byte(`{"type":"user.created"}`)
	now := time.Now()
	cases := map[string]struct {
		hdr  map[string]string
		want int
	}{
		"valid":      {signSW("msg_1", now, body), 202},
		"missing":    {nil, 401},
		"stale":      {signSW("msg_2", now.Add(-10*time.Minute), body), 401},
		"future":     {signSW("msg_3", now.Add(10*time.Minute), body), 401},
		"wrong body": {signSW("msg_4", now, []byte(`{"type":"other"}`)), 401},
	}
	for name, c := range cases {
		st, hdr, b := g.post("sw", body, c.hdr)
		if st != c.want {
			t.Errorf("%s: %d %s, want %d", name, st, b, c.want)
			continue
		}
		if st == 401 {
			p := decodeProblem(t, hdr, b)
			if strings.Contains(string(b), testSecret) || strings.Contains(string(b), strings.TrimPrefix(testSecret, "whsec_")) {
				t.Errorf("%s: the problem echoes the secret: %s", name, b)
			}
			if p.Status != 401 {
				t.Errorf("%s: problem %+v", name, p)
			}
		}
	}
	evs, _, _ := g.Store().ListEvents(context.Background(), storage.EventFilter{})
	if len(evs) != 1 || evs[0].EventID != "msg_1" || evs[0].Type != "user.created" {
		t.Fatalf("stored %+v, want only the valid one (event id from webhook-id)", evs)
	}
}

func TestIngestErrors(t *testing.T) {
	g := startGateway(t, gwOptions{})
	st, hdr, b := g.post("nope", []byte(`{}`), nil)
	if st != 404 || decodeProblem(t, hdr, b).Status != 404 {
		t.Fatalf("unknown source: %d %s", st, b)
	}
	big := []byte(`{"id":"big","pad":"` + strings.Repeat("x", 8<<10) + `"}`)
	st, hdr, b = g.post("open", big, nil)
	if st != 413 || decodeProblem(t, hdr, b).Status != 413 {
		t.Fatalf("oversized body: %d %s", st, b)
	}
	if evs := eventsIn(t, g.Store()); len(evs) != 0 {
		t.Fatalf("a refused request stored %d events", len(evs))
	}
}

// failingStore is the real store with Ingest failing on command.
type failingStore struct {
	storage.Store
	mu   sync.Mutex
	fail bool
}

func (f *failingStore) set(v bool) { f.mu.Lock(); f.fail = v; f.mu.Unlock() }

func (f *failingStore) Ingest(ctx context.Context, r *storage.IngestRequest) (storage.IngestResult, error) {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return storage.IngestResult{}, errors.New("injected: disk full")
	}
	return f.Store.Ingest(ctx, r)
}

func TestIngestStoreFailureIs503(t *testing.T) {
	var fs *failingStore
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store {
		fs = &failingStore{Store: s}
		return fs
	}})
	fs.set(true)
	st, hdr, b := g.post("open", []byte(`{"id":"f1"}`), nil)
	if st != 503 || hdr.Get("Retry-After") == "" || decodeProblem(t, hdr, b).Status != 503 {
		t.Fatalf("store failure: %d retry-after=%q %s", st, hdr.Get("Retry-After"), b)
	}
	if strings.Contains(string(b), "disk full") {
		t.Fatalf("internal error leaked into the answer: %s", b)
	}
	fs.set(false)
	if st, _, b := g.post("open", []byte(`{"id":"f1"}`), nil); st != 202 {
		t.Fatalf("after recovery: %d %s", st, b)
	}
}

func TestIngestFanOut(t *testing.T) {
	rcv := newReceiver(t)
	extra := fmt.Sprintf(`endpoints:
  - {id: all, tenant: acme, url: %q}
  - {id: invoices, tenant: acme, url: %q, event_types: ["invoice.*"]}
  - {id: sw-only, tenant: acme, url: %q, sources: [sw]}
  - {id: globex, tenant: globex, url: %q}
`, rcv.url("all"), rcv.url("invoices"), rcv.url("sw-only"), rcv.url("globex"))
	g := startGateway(t, gwOptions{extra: extra})
	g.post("open", []byte(`{"id":"a","type":"invoice.paid"}`), nil)
	g.post("open", []byte(`{"id":"b","type":"customer.created"}`), nil)
	testsupport.WaitFor(t, 10*time.Second, "3 deliveries", func() bool { return rcv.count() >= 3 })
	got := rcv.byPath()
	if got["/all"] != 2 || got["/invoices"] != 1 || got["/sw-only"] != 0 || got["/globex"] != 0 {
		t.Fatalf("fan-out %v", got)
	}
}

// Stored headers are in canonical form whatever case the provider sent,
// a repeated header keeps every value, and credentials are never stored.
func TestIngestStoresHeaders(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"id":"hdr-1","type":"t"}`
	req := "POST /ingest/open HTTP/1.1\r\nHost: gw\r\ncontent-type: application/json\r\nx-custom-NAME: one\r\n" +
		"X-Repeated: a\r\nx-repeated: b\r\ncookie: session=secret\r\nAUTHORIZATION: Bearer secret\r\n" +
		"proxy-authorization: Basic c2VjcmV0\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	st, _, b := rawRequest(t, g.PublicAddr(), req)
	id := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	ev, err := g.Store().GetEvent(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"X-Custom-Name": "one", "X-Repeated": "a, b", "Content-Type": "application/json"}
	for k, v := range want {
		if ev.Headers[k] != v {
			t.Errorf("header %s = %q, want %q (all: %v)", k, ev.Headers[k], v, ev.Headers)
		}
	}
	for k, v := range ev.Headers {
		if strings.Contains(v, "secret") || strings.Contains(v, "c2VjcmV0") {
			t.Errorf("credential stored: %s: %s", k, v)
		}
	}
}

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
	testsupport.WaitFor(t, 10*time.Second, "the event of the abandoned request to be stored", func() bool {
		stored = eventsIn(t, g.Store())
		return len(stored) == 1
	})
	st, hdr, b := g.post("open", []byte(body), nil)
	if st != 202 || hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("retry after the dropped connection: %d replayed=%q %s, want 202 replayed", st, hdr.Get(inbound.HeaderReplayed), b)
	}
	var ans map[string]string
	if err := json.Unmarshal(b, &ans); err != nil || ans["id"] != stored[0].ID || ans["event_id"] != "gone-1" {
		t.Fatalf("retry answer %s, want the stored event %s", b, stored[0].ID)
	}
	testsupport.WaitFor(t, 10*time.Second, "one delivery", func() bool { return rcv.count() >= 1 })
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
		if st != 202 || hdr.Get(inbound.HeaderReplayed) != "" {
			t.Fatalf("%s: %d %s replayed=%q, want a first 202", src, st, b, hdr.Get(inbound.HeaderReplayed))
		}
		first[src] = string(b)
	}
	if first["open"] == first["open2"] {
		t.Fatalf("both sources got one answer %s", first["open"])
	}
	for _, src := range []string{"open", "open2"} {
		st, hdr, b := g.post(src, []byte(`{"id":"same","src":"`+src+`"}`), nil)
		if st != 202 || hdr.Get(inbound.HeaderReplayed) != "true" || string(b) != first[src] {
			t.Fatalf("%s retry: %d %s replayed=%q, want %s", src, st, b, hdr.Get(inbound.HeaderReplayed), first[src])
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
				codes[i], answers[i], replayed[i] = st, string(b), hdr.Get(inbound.HeaderReplayed) == "true"
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
	testsupport.WaitFor(t, 10*time.Second, "20 deliveries", func() bool { return rcv.count() >= 20 })
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
