package badger

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The outbox floors (floor.go) remembered one entry per endpoint id that
// ever claimed, and nothing forgot an entry but a failed commit: a tenant
// that creates endpoints, sends them a delivery and deletes them
// (DeleteEndpoint, then CancelEndpoint, as DELETE /endpoints/{id} does)
// grew the map by one id for every endpoint it ever had, for the life of
// the process. An absent floor is always safe (the scan starts at the
// front), so a cancelled endpoint's floor goes.
func TestFloorsOfDeletedEndpointsAreForgotten(t *testing.T) {
	db := openTestDB(t, Options{})
	ctx := context.Background()
	const endpoints = 1000
	now := time.Now().UTC()
	for i := range endpoints {
		ep := fmt.Sprintf("ep_deleted_%04d", i)
		acceptFor(t, db, "acme", fmt.Sprintf("e-%d", i), now, ep)
		if _, err := db.Claim(ctx, ep, now, 10, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CancelEndpoint(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	db.floors.mu.Lock()
	n := len(db.floors.m)
	db.floors.mu.Unlock()
	if n > 10 {
		t.Errorf("after %d endpoints were claimed and their backlogs cancelled, the store still holds %d outbox floors in memory (one per endpoint id ever used)", endpoints, n)
	}
}
