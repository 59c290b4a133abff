package gateway

import (
	"context"
	"sync/atomic"
	"testing"

	"hookgate/storage"
)

// stopDuringSecondEnqueue holds the second Enqueue call from now on until
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

func (s *stopDuringSecondEnqueue) Enqueue(ctx context.Context, ds []storage.Delivery) error {
	if s.calls.Add(1) == s.at.Load() {
		close(s.entered)
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Enqueue(ctx, ds)
}

// TestReplayStoppedBetweenTheWritesOfAStepDoesNotEnqueueTwice: a step of
// 100 events to 21 endpoints is two writes (replayWriteMax). A graceful
// shutdown (a deploy) between them must not leave the job's cursor before
// the batch whose first write is stored: the next start would enqueue those
// ~2,000 deliveries again, and every receiver get those events twice.
func TestReplayStoppedBetweenTheWritesOfAStepDoesNotEnqueueTwice(t *testing.T) {
	rcv := newReceiver(t)
	ws := &stopDuringSecondEnqueue{entered: make(chan struct{})}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { ws.Store = s; return ws }})
	ingestN(t, g, "stop", replayBatch)
	var eps []string
	for i := range 21 {
		id := "st" + string(rune('a'+i))
		must[endpointView](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{
			"id": id, "tenant": "acme", "url": rcv.url(id), "rate_limit": 0.001}))
		eps = append(eps, id)
	}
	ws.at.Store(ws.calls.Load() + 2) // the step's second write
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	<-ws.entered
	g = g.restart(gwOptions{}) // Shutdown stops the runner: the held write fails with the context
	job = waitReplay(t, g, acmeToken, job.ID)
	total := 0
	for _, ep := range eps {
		ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Endpoint: ep, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		total += len(ds)
	}
	if job.State != "completed" || total != 2100 || job.Enqueued != 2100 {
		t.Fatalf("job %s matched=%d enqueued=%d; %d deliveries stored, want 2100 (100 events x 21 endpoints, replayed once)",
			job.State, job.Matched, job.Enqueued, total)
	}
}
