package badger

import (
	"context"
	"testing"
	"time"

	"hookgate/storage"
)

// One replay job record that cannot be decoded must not fail the listing
// of the others: it stopped every start's resume of the running jobs (they
// showed as running for good) and every retention sweep of finished ones.
func TestListReplaysSkipsAnUnreadableJobRecord(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	bad := storage.ReplayJob{ID: storage.NewID("rpl_", now.Add(-time.Hour)), Tenant: "acme", State: storage.ReplayRunning, CreatedAt: now}
	running := storage.ReplayJob{ID: storage.NewID("rpl_", now), Tenant: "acme", State: storage.ReplayRunning, CreatedAt: now}
	old := storage.ReplayJob{ID: storage.NewID("rpl_", now.Add(-2*time.Hour)), Tenant: "acme", State: storage.ReplayCompleted,
		CreatedAt: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-2 * time.Hour)}
	for _, j := range []*storage.ReplayJob{&bad, &running, &old} {
		if err := db.PutReplay(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	damage(t, db, replayKey(bad.ID))
	jobs, err := db.ListReplays(ctx, storage.ReplayRunning)
	if err != nil || len(jobs) != 1 || jobs[0].ID != running.ID {
		t.Fatalf("running jobs: %+v, %v; want %s alone", jobs, err, running.ID)
	}
	if n, err := db.PurgeReplays(ctx, now.Add(-time.Hour)); err != nil || n != 1 {
		t.Fatalf("PurgeReplays: %d, %v; want the old finished job", n, err)
	}
}
