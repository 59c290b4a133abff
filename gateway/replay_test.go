package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"hookgate/storage"
)

// TestReplayResumesAfterRestart: a bulk replay that was running when the
// process stopped continues from its cursor at the next start; finished
// jobs are left alone.
func TestReplayResumesAfterRestart(t *testing.T) {
	rcv := newReceiver(t)
	extra := fmt.Sprintf("endpoints:\n  - {id: a, tenant: acme, url: %q}\n", rcv.url("a"))
	g := startGateway(t, gwOptions{extra: extra})
	ingestN(t, g, "res", 5)
	waitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 5 })

	// The job had done the newest two events when the process died: its
	// cursor points after them. (Newest in the listing's order: IDs made
	// in the same millisecond are not in the order of ingest.)
	ctx := context.Background()
	_, cursor, err := g.Store().ListEvents(ctx, storage.EventFilter{Tenant: "acme", Limit: 2})
	if err != nil || cursor == "" {
		t.Fatalf("cursor: %q %v", cursor, err)
	}
	all, _, err := g.Store().ListEvents(ctx, storage.EventFilter{Tenant: "acme"})
	if err != nil || len(all) != 5 {
		t.Fatalf("events: %d %v", len(all), err)
	}
	var ids []string // oldest first
	for i := len(all) - 1; i >= 0; i-- {
		ids = append(ids, all[i].ID)
	}
	now := time.Now().UTC()
	running := storage.ReplayJob{ID: storage.NewID("rpl_", now), Tenant: "acme", Source: "open", State: storage.ReplayRunning,
		Matched: 2, Enqueued: 2, Cursor: cursor, CreatedAt: now, UpdatedAt: now}
	done := storage.ReplayJob{ID: storage.NewID("rpl_", now), Tenant: "acme", Source: "open", State: storage.ReplayCompleted,
		CreatedAt: now, UpdatedAt: now}
	g = g.restart(gwOptions{extra: extra, wrapStore: func(s storage.Store) storage.Store {
		for _, j := range []*storage.ReplayJob{&running, &done} {
			if err := s.PutReplay(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}})

	job := waitReplay(t, g, acmeToken, running.ID)
	if job.State != "completed" || job.Matched != 5 || job.Enqueued != 5 {
		t.Fatalf("resumed job %+v, want 3 more events replayed", job)
	}
	waitFor(t, 10*time.Second, "the resumed replay's deliveries", func() bool { return rcv.count() == 8 })
	for _, id := range ids[:3] { // the oldest three, which the cursor had not reached
		if n := len(must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?event="+id, acmeToken, nil)).Data); n != 2 {
			t.Fatalf("event %s has %d deliveries, want 2", id, n)
		}
	}
	for _, id := range ids[3:] {
		if n := len(must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?event="+id, acmeToken, nil)).Data); n != 1 {
			t.Fatalf("event %s has %d deliveries, want 1 (done before the restart)", id, n)
		}
	}
	if j := must[replayView](t, 200)(g.api("GET", "/replays/"+done.ID, acmeToken, nil)); j.State != "completed" || j.Enqueued != 0 {
		t.Fatalf("a completed job ran again: %+v", j)
	}
}

// TestReplayRunnerLifecycle: Stop is idempotent; a job submitted after
// Stop stays stored as running and the next start runs it.
func TestReplayRunnerLifecycle(t *testing.T) {
	g := startGateway(t, gwOptions{})
	r := g.bg.replays
	r.Stop()
	r.Stop()
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	stored, err := g.Store().GetReplay(context.Background(), job.ID)
	if err != nil || stored.State != storage.ReplayRunning {
		t.Fatalf("job after stop: %+v %v", stored, err)
	}
	g = g.restart(gwOptions{})
	if j := waitReplay(t, g, acmeToken, job.ID); j.State != "completed" {
		t.Fatalf("after restart: %+v", j)
	}
}
