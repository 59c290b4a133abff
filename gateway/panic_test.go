package gateway

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"hookgate/storage"
)

// panickyStore is the real store whose Accept panics after its write and
// whose ListEvents panics, while on.
type panickyStore struct {
	storage.Store
	on atomic.Bool
}

func (p *panickyStore) Accept(ctx context.Context, r *storage.AcceptRequest) (storage.AcceptResult, error) {
	res, err := p.Store.Accept(ctx, r)
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
	if st != 202 || hdr.Get(headerReplayed) != "true" {
		t.Fatalf("the provider's retry: %d (replayed %q) %s; want the stored 202", st, hdr.Get(headerReplayed), b)
	}
	if evs := must[apiList[eventView]](t, 200)(g.api("GET", "/events", acmeToken, nil)).Data; len(evs) != 1 {
		t.Fatalf("%d events, want the one stored before the panic", len(evs))
	}
}
