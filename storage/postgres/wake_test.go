package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"hookgate/internal/pgtest"
	"hookgate/internal/testsupport"
	"hookgate/storage/postgres"
)

// listen runs db.Listen until the test ends, and returns what it heard.
// Listen has no "listening now" signal: tests announce until heard.
func listen(t *testing.T, db *postgres.DB) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var heard []string
	done := make(chan error, 1)
	go func() {
		done <- db.Listen(ctx, func(ids []string) {
			mu.Lock()
			heard = append(heard, ids...)
			mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(heard)
	}
}

// waitHeard announces from a until want is among what heard returns.
func waitHeard(t *testing.T, a *postgres.DB, heard func() []string, want string) {
	t.Helper()
	testsupport.WaitFor(t, 10*time.Second, "the other handle to hear "+want, func() bool {
		a.Announce(want)
		return slices.Contains(heard(), want)
	})
}

// An announcement of one gateway reaches the others on the same schema,
// not itself and not a gateway on another schema; a large batch arrives
// whole over several notifications.
func TestAnnounceReachesTheOtherGateways(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	_, other := pgtest.Schema(t)
	open := func(schema string) *postgres.DB {
		db, err := postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema, MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	a, b, elsewhere := open(schema), open(schema), open(other)
	heardA, heardB, heardElsewhere := listen(t, a), listen(t, b), listen(t, elsewhere)
	waitHeard(t, a, heardB, "ep-first")

	var many []string
	for i := range 2000 {
		many = append(many, fmt.Sprintf("endpoint-%04d", i)) // about 28 KB: several payloads
	}
	a.Announce(many...)
	a.Announce("ep-last")
	waitHeard(t, a, heardB, "ep-last")
	got := map[string]bool{}
	for _, id := range heardB() {
		got[id] = true
	}
	for _, id := range many {
		if !got[id] {
			t.Fatalf("announced %s was never heard (heard %d ids)", id, len(got))
		}
	}
	// b's own announcement reaches a: then a has heard everything it
	// would ever hear of its own, if it heard its own.
	waitHeard(t, b, heardA, "from-b")
	for _, id := range heardA() {
		if id != "from-b" {
			t.Fatalf("a heard its own announcement %q", id)
		}
	}
	if h := heardElsewhere(); len(h) != 0 {
		t.Fatalf("a gateway on another schema heard %v", h[:min(len(h), 3)])
	}
}

// Listen ends with the connection's failure, so that the caller can
// listen again (and poll meanwhile); a closed store refuses at once.
func TestListenEndsWhenItsContextDoes(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	db, err := postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := db.Listen(ctx, func([]string) {}); err == nil {
		t.Fatal("Listen returned nil when its context ended")
	}
	db.Announce("ep") // starts the sender; Close stops it
	_ = db.Close()
	if err := db.Listen(context.Background(), func([]string) {}); err == nil {
		t.Fatal("Listen on a closed store returned nil")
	}
}
