package gateway

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
)

// heldIngestStore holds every Ingest until release is closed, and says
// when one has arrived.
type heldIngestStore struct {
	storage.Store
	arrived chan struct{}
	once    sync.Once
	release chan struct{}
}

func (s *heldIngestStore) Ingest(ctx context.Context, req *storage.IngestRequest) (storage.IngestResult, error) {
	s.once.Do(func() { close(s.arrived) })
	<-s.release
	return s.Store.Ingest(ctx, req)
}

// An ingest in flight when its source is deleted is counted after
// forgetSource ran: the deleted source's series comes back for good, and
// a source created later with the same id (maybe another tenant's)
// continues its count.
func TestSourceSeriesStayForgottenAfterIngestInFlight(t *testing.T) {
	hs := &heldIngestStore{arrived: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(hs.release) }) }
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { hs.Store = s; return hs }})
	t.Cleanup(unblock)

	done := make(chan int, 1)
	go func() {
		st, _, _ := g.post("open", []byte(`{"id":"inflight","type":"a"}`), nil)
		done <- st
	}()
	select {
	case <-hs.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the ingest did not reach the store")
	}
	// The delete runs on its own: it waits for the ingest in flight (as an
	// endpoint's delete does, registry.exclusive).
	deleted := make(chan int, 1)
	go func() {
		st, _, _ := g.api("DELETE", "/sources/open", acmeToken, nil)
		deleted <- st
	}()
	var delSt int
	select {
	case delSt = <-deleted: // it did not wait: the series comes back below
		unblock()
	case <-time.After(time.Second): // it waits for the ingest: let that end
		unblock()
		delSt = <-deleted
	}
	if delSt != 204 {
		t.Fatalf("delete: %d", delSt)
	}
	var st int
	select {
	case st = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the ingest in flight did not end")
	}
	t.Logf("the ingest in flight at the delete answered %d", st)
	if text := scrapeMetrics(t, g); strings.Contains(text, `source="open"`) {
		i := strings.Index(text, `hookgate_ingest_requests_total{`)
		line := text[i:]
		line = line[:strings.IndexByte(line, '\n')]
		t.Fatalf("after DELETE /sources/open (204) /metrics still has the deleted source's series: %s", line)
	}
}
