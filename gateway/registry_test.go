package gateway

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
	"hookgate/storage/badger"
)

// Reloads race: each admin change and each 410 reloads the registry. A
// reload that read the store before a change must not publish its list to
// the dispatcher after the reload that read the change: the dispatcher
// would keep the older list (a deleted endpoint still claimed, a new one
// never started) until the next change.
func TestReloadsPublishInOrder(t *testing.T) {
	db, err := badger.Open(t.TempDir(), badger.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	reg := newRegistry(db, slog.New(slog.DiscardHandler))

	var mu sync.Mutex
	var last []storage.Endpoint
	record := func(s *snapshot) {
		mu.Lock()
		last = s.endpoints
		mu.Unlock()
	}
	// A reads the store (no endpoints) and is slow to publish.
	inA, releaseA, doneA := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(doneA)
		if _, err := reg.reload(ctx, func(s *snapshot) {
			close(inA)
			<-releaseA
			record(s)
		}); err != nil {
			t.Error(err)
		}
	}()
	<-inA
	ep := &storage.Endpoint{ID: "ep-new", Tenant: "acme", URL: "https://example.com/hook", CreatedAt: time.Now()}
	if err := db.PutEndpoint(ctx, ep); err != nil {
		t.Fatal(err)
	}
	doneB := make(chan struct{})
	go func() {
		defer close(doneB)
		if _, err := reg.reload(ctx, record); err != nil {
			t.Error(err)
		}
	}()
	// B must wait for A; give it the chance not to (a bounded wait that
	// only decides whether a broken order is seen, never the verdict on a
	// correct one).
	select {
	case <-doneB:
	case <-time.After(200 * time.Millisecond):
	}
	close(releaseA)
	<-doneA
	<-doneB
	mu.Lock()
	defer mu.Unlock()
	if len(last) != 1 || last[0].ID != "ep-new" {
		t.Fatalf("published last: %v; want the list with ep-new, read after the change", last)
	}
}
