package gateway

import (
	"testing"
	"time"

	"hookgate/storage"
)

// Bulk replay jobs (rp: records) were never deleted: not by retention, not
// by anything. Each POST /replays left a record for ever, and every start
// read all of them into memory (ListReplays loads every job, then keeps
// the running ones) to find those to resume. A tenant's nightly "replay
// what failed" (or a script that polls with POST /replays) grew the data
// directory and the start's memory without bound. Finished jobs now go
// with retention.
func TestFinishedReplayJobsArePurgedWithRetention(t *testing.T) {
	g := startGateway(t, gwOptions{config: func(c *Config) { c.Retention = Duration(time.Second) }})
	const jobs = 200
	for range jobs {
		must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open", "status": "failed"}))
	}
	waitFor(t, 20*time.Second, "every job to finish", func() bool {
		running, err := g.store.ListReplays(t.Context(), storage.ReplayRunning)
		return err == nil && len(running) == 0
	})
	// Let the jobs pass retention (1s), then sweep as the minute's loop does.
	finished := time.Now()
	waitFor(t, 5*time.Second, "retention to pass", func() bool { return time.Since(finished) > 1500*time.Millisecond })
	g.bg.purge(t.Context())
	all, err := g.store.ListReplays(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) > 0 {
		t.Errorf("%d finished replay jobs, all older than retention (1s), are still stored (of %d made); nothing ever deletes them", len(all), jobs)
	}
}
