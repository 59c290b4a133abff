package gateway

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

// A bulk replay whose write fails (a full disk, for a moment) retries the
// step instead of failing the job: once the store writes again, the job
// completes with every event replayed once. A store that keeps failing
// still fails the job, after replayRetryFor.
func TestBulkReplayRetriesStoreErrors(t *testing.T) {
	defer func(d time.Duration) { replayRetryFor = d }(replayRetryFor)
	replayRetryFor = 2 * time.Second
	rcv := newReceiver(t)
	g, fs := startFaulty(t, endpointA(rcv))
	ingestN(t, g, "rr", 3)
	waitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 3 })

	fs.set(faultBefore, "EnqueueReplay")
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	waitFor(t, 10*time.Second, "two failed enqueues", func() bool { return fs.failures("EnqueueReplay") >= 2 })
	if j := must[replayView](t, 200)(g.api("GET", "/replays/"+job.ID, acmeToken, nil)); j.State != "running" {
		t.Fatalf("after a failed write the job is %+v, want still running", j)
	}
	fs.set(faultNone, "EnqueueReplay")
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.State != "completed" || job.Matched != 3 || job.Enqueued != 3 {
		t.Fatalf("job after the store recovered: %+v", job)
	}
	waitFor(t, 10*time.Second, "the replayed deliveries", func() bool { return rcv.count() == 6 })

	fs.set(faultBefore, "EnqueueReplay")
	job = must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	if job = waitReplay(t, g, acmeToken, job.ID); job.State != "failed" || job.Enqueued != 0 {
		t.Fatalf("job on a store that keeps failing: %+v, want failed", job)
	}
}

// A write reported failed after it was stored (an ambiguous failure: a
// timeout after the write, a lost answer) is not written again: the retry
// goes on from the job's stored progress. (Once, a retry ran the whole
// step again, and a job whose last batch was done had its cursor cleared,
// so it replayed every event a second time.)
func TestBulkReplayRetryGoesOnFromTheStoredProgress(t *testing.T) {
	rcv := newReceiver(t)
	fs := &failAfterWrite{}
	fs.fails.Store(2)
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store { fs.Store = s; return fs })
	ingestN(t, g, "rp", 3)
	waitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 3 })

	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	waitFor(t, 10*time.Second, "the write reported failed", func() bool { return fs.fails.Load() < 2 })
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.State != "completed" || job.Matched != 3 || job.Enqueued != 3 {
		t.Fatalf("job: %+v", job)
	}
	waitFor(t, 10*time.Second, "the replayed deliveries", func() bool { return rcv.count() >= 6 })
	ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Limit: 100})
	if err != nil || len(ds) != 6 {
		t.Fatalf("%d deliveries, %v; want 6 (3 events, replayed once)", len(ds), err)
	}
}

// failAfterWrite reports the first writes of a replay's progress failed
// after storing them.
type failAfterWrite struct {
	storage.Store
	fails atomic.Int32
}

func (f *failAfterWrite) EnqueueReplay(ctx context.Context, job *storage.ReplayJob, ds []storage.Delivery) error {
	if err := f.Store.EnqueueReplay(ctx, job, ds); err != nil {
		return err
	}
	if f.fails.Add(-1) >= 0 {
		return errInjected
	}
	return nil
}

// failingFailWrite fails every EnqueueReplay, and the first writes of a
// job as failed.
type failingFailWrite struct {
	storage.Store
	fails atomic.Int32
}

func (f *failingFailWrite) EnqueueReplay(context.Context, *storage.ReplayJob, []storage.Delivery) error {
	return errInjected
}

func (f *failingFailWrite) PutReplay(ctx context.Context, job *storage.ReplayJob) error {
	if job.State == storage.ReplayFailed && f.fails.Add(-1) >= 0 {
		return errInjected
	}
	return f.Store.PutReplay(ctx, job)
}

// The write that records a job as failed is retried too: a job whose
// failure went unrecorded showed as running until the next start.
func TestBulkReplayRetriesRecordingItsFailure(t *testing.T) {
	defer func(d time.Duration) { replayRetryFor = d }(replayRetryFor)
	replayRetryFor = time.Second
	rcv := newReceiver(t)
	fs := &failingFailWrite{}
	fs.fails.Store(2)
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store { fs.Store = s; return fs })
	ingestN(t, g, "ff", 2) // their first deliveries are written by Ingest, not Enqueue
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	if job = waitReplay(t, g, acmeToken, job.ID); job.State != "failed" || fs.fails.Load() > 0 {
		t.Fatalf("job: %+v (failed writes still to come: %d)", job, fs.fails.Load())
	}
}

// A bulk replay whose first read of its job fails (the store briefly
// unreadable) retries the read like a step, and completes once the store
// reads again, instead of staying running until the next start.
func TestBulkReplayRetriesItsFirstRead(t *testing.T) {
	rcv := newReceiver(t)
	fs := &failReplayReads{}
	fs.fails.Store(2)
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store { fs.Store = s; return fs })
	ingestN(t, g, "rf", 3)
	waitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 3 })

	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	waitFor(t, 10*time.Second, "the failed reads", func() bool { return fs.fails.Load() <= 0 })
	if job = waitReplay(t, g, acmeToken, job.ID); job.State != "completed" || job.Enqueued != 3 {
		t.Fatalf("job: %+v", job)
	}
	waitFor(t, 10*time.Second, "the replayed deliveries", func() bool { return rcv.count() == 6 })
}

// failReplayReads fails the first reads of a replay job.
type failReplayReads struct {
	storage.Store
	fails atomic.Int32
}

func (f *failReplayReads) GetReplay(ctx context.Context, id string) (storage.ReplayJob, error) {
	if f.fails.Add(-1) >= 0 {
		return storage.ReplayJob{}, errInjected
	}
	return f.Store.GetReplay(ctx, id)
}
