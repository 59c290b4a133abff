package gateway

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"hookgate/storage"
	"hookgate/storage/badger"
)

// Reloads race: each admin change and each 410 reloads the registry. A
// reload that read the store before a change must not publish its list to
// the dispatcher after the reload that read the change: the dispatcher
// would keep the older list (a deleted endpoint still claimed, a new one
// never started) until the next change. So a reload publishes while it
// still holds the lock the next reload must take.
func TestReloadsPublishInOrder(t *testing.T) {
	db, err := badger.Open(t.TempDir(), badger.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	reg := newRegistry(db, slog.New(slog.DiscardHandler))

	var last []storage.Endpoint
	published := 0
	publish := func(s *snapshot) {
		if reg.mu.TryLock() {
			reg.mu.Unlock()
			t.Error("published outside the reload lock: a newer reload could publish first")
		}
		last = s.endpoints
		published++
	}
	if _, err := reg.reload(ctx, publish); err != nil {
		t.Fatal(err)
	}
	ep := &storage.Endpoint{ID: "ep-new", Tenant: "acme", URL: "https://example.com/hook", CreatedAt: time.Now()}
	if err := db.PutEndpoint(ctx, ep); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.reload(ctx, publish); err != nil {
		t.Fatal(err)
	}
	if published != 2 || len(last) != 1 || last[0].ID != "ep-new" {
		t.Fatalf("published %d times, last %v; want 2, the last with ep-new", published, last)
	}
}
