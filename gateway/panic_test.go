package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// panickyStore is the real store whose Ingest panics after its write and
// whose ListEvents panics, while on.
type panickyStore struct {
	storage.Store
	on atomic.Bool
}

func (p *panickyStore) Ingest(ctx context.Context, r *storage.IngestRequest) (storage.IngestResult, error) {
	res, err := p.Store.Ingest(ctx, r)
	if p.on.Load() {
		panic("injected panic after the write")
	}
	return res, err
}

func (p *panickyStore) ListEvents(ctx context.Context, f storage.EventFilter) ([]storage.Event, string, error) {
	if p.on.Load() {
		panic("injected panic")
	}
	return p.Store.ListEvents(ctx, f)
}

// A handler that panics gets a 500 problem, logged with its stack, and
// the gateway goes on serving: fasthttp does not recover panics, so one
// ended the process. An ingest that panicked after its write is answered
// from the store when the provider retries.
func TestHandlerPanicIsA500(t *testing.T) {
	ps := &panickyStore{}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { ps.Store = s; return ps }})
	ps.on.Store(true)
	body := []byte(`{"id":"p1","type":"t"}`)
	wantProblem(t, "ingest that panics", 500, "")(g.post("open", body, nil))
	wantProblem(t, "listing that panics", 500, "")(g.api("GET", "/events", acmeToken, nil))
	if !strings.Contains(g.logs.String(), "a request handler panicked") {
		t.Fatalf("the panic is not logged:\n%s", g.logs)
	}
	ps.on.Store(false)
	st, hdr, b := g.post("open", body, nil)
	if st != 202 || hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("the provider's retry: %d (replayed %q) %s; want the stored 202", st, hdr.Get(inbound.HeaderReplayed), b)
	}
	if evs := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events", acmeToken, nil)).Data; len(evs) != 1 {
		t.Fatalf("%d events, want the one stored before the panic", len(evs))
	}
}

// An ingest that panics after its write gives back the max_in_flight slot
// it took for the hand-off, and its delivery is due at once. Once the
// gateway went on after a panic, the slot was gone for good: with
// max_in_flight 1 the endpoint never got another delivery.
func TestIngestPanicDoesNotLeakADeliverySlot(t *testing.T) {
	rcv := newReceiver(t)
	ps := &panickyStore{}
	g := startGateway(t, gwOptions{
		extra:     fmt.Sprintf("endpoints:\n  - {id: a, tenant: acme, url: %q, max_in_flight: 1}\n", rcv.url("a")),
		wrapStore: func(s storage.Store) storage.Store { ps.Store = s; return ps },
	})
	ps.on.Store(true)
	wantProblem(t, "ingest that panics", 500, "")(g.post("open", []byte(`{"id":"slot-1","type":"t"}`), nil))
	ps.on.Store(false)
	must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"slot-2","type":"t"}`), nil))
	testsupport.WaitFor(t, 10*time.Second, "both events' deliveries", func() bool { return rcv.count() == 2 })
}
