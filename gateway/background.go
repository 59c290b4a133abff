package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"hookgate/gateway/admin"
	"hookgate/outbound"
	"hookgate/storage"
)

// Retention sweeps: how often, and how many events one transaction removes
// (small batches keep each write short, so ingest never waits long behind
// a purge).
const (
	retentionEvery = time.Minute
	retentionBatch = 256
)

// storeCheckEvery is how often an idle gateway checks that its store has
// not failed for good (ingests and /readyz check it as they go).
var storeCheckEvery = 5 * time.Second

// background owns the gateway's periodic jobs, the cancelling of deleted
// endpoints' backlogs and the bulk replay runner.
// start returns at once; stop cancels them and waits until they are gone.
type background struct {
	g       *Gateway
	replays *replayRunner
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newBackground(g *Gateway) *background { return &background{g: g, replays: newReplayRunner(g)} }

func (b *background) start(ctx context.Context) {
	ctx, b.cancel = context.WithCancel(ctx)
	b.replays.Start(ctx)
	b.wg.Add(3)
	go func() {
		defer b.wg.Done()
		// Events, deliveries and attempts older than the retention period
		// go, a batch at a time.
		everyUntil(ctx, retentionEvery, b.purge)
	}()
	every := storeCheckEvery
	go func() {
		defer b.wg.Done()
		b.storeCheckLoop(ctx, every)
	}()
	go func() {
		defer b.wg.Done()
		b.g.backlogs.run(ctx)
	}()
	// The last hour's outbox depth, per endpoint (GET /stats).
	b.wg.Go(func() { everyUntil(ctx, depthSampleEvery, b.sampleDepth) })
	if c, ok := b.g.cluster(); ok {
		b.wg.Go(func() { b.g.watchCatalog(ctx, c) })
		b.wg.Go(func() { b.g.listenWakes(ctx, c) })
	}
}

func (b *background) stop() {
	if b.cancel != nil {
		b.cancel()
	}
	b.replays.Stop()
	b.wg.Wait()
}

// depthSampleEvery is how often the outbox depth of each endpoint is
// sampled for the last hour's figures (GET /stats).
var depthSampleEvery = 15 * time.Second

// everyUntil runs fn at once and then every d until ctx ends.
func everyUntil(ctx context.Context, d time.Duration, fn func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (b *background) sampleDepth(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, depthSampleEvery)
	defer cancel()
	now := time.Now()
	for _, ep := range b.g.reg.current().endpoints {
		live, _, err := b.g.store.Depth(ctx, ep.ID, now, admin.DepthLimit)
		if err != nil {
			return // the store check reports a store that fails
		}
		b.g.metrics.recent.Pending(ep.ID, live, now)
	}
}

// storeCheckLoop pings the store until ctx ends, and stops the gateway
// if the store failed for good (storeFailed). It also reloads a registry
// whose last reload failed: a deleted endpoint stayed in memory, a new one
// got nothing, until the next change through the admin API.
func (b *background) storeCheckLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err := b.g.store.Ping(pctx)
		cancel()
		b.g.storeFailed(err)
		if err == nil && b.g.registryStale.Load() {
			b.g.reloadRegistry()
		}
	}
}

func (b *background) purge(ctx context.Context) {
	// One gateway of a cluster sweeps at a time; the others skip this turn.
	unlock, _, ok, err := b.g.tryLockCluster(ctx, lockRetention)
	if err != nil || !ok {
		return
	}
	defer unlock()
	now := time.Now()
	cutoff, liveCutoff := now.Add(-b.g.cfg.Retention.D()), now.Add(-b.g.longestRetryWindow())
	for ctx.Err() == nil {
		n, err := b.g.store.Purge(ctx, cutoff, liveCutoff, retentionBatch)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				b.g.log.Warn("retention sweep failed", "err", err)
			}
			return
		}
		if n < retentionBatch { // Purge has gone through every expired event
			break
		}
	}
	if _, err := b.g.store.PurgeReplays(ctx, cutoff); err != nil && !errors.Is(err, context.Canceled) {
		b.g.log.Warn("retention sweep of replay jobs failed", "err", err)
	}
}

// longestRetryWindow is how long a delivery to one of the endpoints may
// retry: its max_elapsed and an attempt's lease. The retention sweep keeps
// an event while a delivery of it is inside this window, however short
// retention is: config.yaml refuses a retention shorter than the windows
// it sets, but an endpoint created through the API under a longer
// retention keeps its window when retention is lowered.
func (g *Gateway) longestRetryWindow() time.Duration {
	w := g.cfg.Retention.D()
	if snap := g.reg.current(); snap != nil {
		for i := range snap.endpoints {
			w = max(w, outbound.WithDefaults(snap.endpoints[i].Retry).MaxElapsed+storage.MaxLease)
		}
	}
	return w
}
