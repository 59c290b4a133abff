package gateway

import (
	"context"
	"sync/atomic"
	"testing"

	"hookgate/storage"
)

// stopDuringSecondEnqueue holds the second EnqueueReplay call from now on until
// its context ends, and then fails it with the context's error: what the
// real store's update does when the caller's context ends before its
// operation is queued (the writer's queue is full, or select picks the
// done context).
type stopDuringSecondEnqueue struct {
	storage.Store
	calls   atomic.Int32
	at      atomic.Int32
	entered chan struct{}
}

func (s *stopDuringSecondEnqueue) EnqueueReplay(ctx context.Context, job *storage.ReplayJob, ds []storage.Delivery) error {
	if s.calls.Add(1) == s.at.Load() {
		close(s.entered)
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.EnqueueReplay(ctx, job, ds)
}

// TestReplayStoppedBetweenTheWritesOfAStepDoesNotEnqueueTwice: a step of
// 100 events to 21 endpoints is two writes (replayWriteMax). A graceful
// shutdown (a deploy) between them must not leave the job's cursor before
// the batch whose first write is stored: the next start would enqueue those
// ~2,000 deliveries again, and every receiver get those events twice.
func TestReplayStoppedBetweenTheWritesOfAStepDoesNotEnqueueTwice(t *testing.T) {
	ws := &stopDuringSecondEnqueue{entered: make(chan struct{})}
	g, eps := fanout(t, func(s storage.Store) storage.Store { ws.Store = s; return ws })
	ws.at.Store(ws.calls.Load() + 2) // the step's second write
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	<-ws.entered
	g = g.restart(gwOptions{}) // Shutdown stops the runner: the held write fails with the context
	wantReplayedOnce(t, g, waitReplay(t, g, acmeToken, job.ID), eps)
}
