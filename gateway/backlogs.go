package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"hookgate/gateway/config"
	"hookgate/storage"
)

// backlogs cancels the live deliveries of deleted endpoints, in the
// background and until it has succeeded: a cancel cut short (a store error,
// a crash) must not leave deliveries pending for ever for an endpoint that
// no longer exists. While an id's backlog is not yet cancelled, no endpoint
// may be created with that id, or it would get the old one's deliveries
// (and the cancel would take its new ones).
type backlogs struct {
	g    *Gateway
	mu   sync.Mutex
	ids  map[string]chan struct{} // closed once the id's backlog is cancelled
	wake chan struct{}
}

func newBacklogs(g *Gateway) *backlogs {
	return &backlogs{g: g, ids: map[string]chan struct{}{}, wake: make(chan struct{}, 1)}
}

// findOrphans marks those of the queued endpoint ids (the ids with live
// deliveries) that name no endpoint: deleted by a process that died or
// failed before it had cancelled their deliveries. It runs before the
// admin API serves, so that no endpoint can take such an id first.
func (b *backlogs) findOrphans(queued []string, known func(id string) bool) {
	for _, id := range queued {
		if !known(id) {
			b.g.log.Warn("an endpoint deleted earlier still has live deliveries: cancelling them", "endpoint", id)
			b.Add(id)
		}
	}
}

// cancelReusedOrphans cancels, before config.yaml is applied, the live
// deliveries of deleted endpoints whose ids config.yaml is about to create
// again (a config endpoint removed, its backlog not yet cancelled when the
// process stopped, then named again), and of endpoints config.yaml moves
// to another tenant: the new endpoint must not get the old one's
// deliveries. It blocks the start for as long as that takes;
// other orphans are cancelled in the background (findOrphans).
func cancelReusedOrphans(ctx context.Context, s storage.Store, cfg *config.Config, log *slog.Logger, queued []string) error {
	if len(queued) == 0 {
		return nil
	}
	eps, err := s.ListEndpoints(ctx)
	if err != nil {
		return err
	}
	configured := cfg.AllEndpoints()
	for _, id := range queued {
		i := slices.IndexFunc(configured, func(ec config.EndpointConfig) bool { return ec.ID == id })
		if i < 0 {
			continue
		}
		j := slices.IndexFunc(eps, func(ep storage.Endpoint) bool { return ep.ID == id })
		if j >= 0 && eps[j].Tenant == configured[i].Tenant {
			continue
		}
		n, err := s.CancelEndpoint(ctx, id)
		if err != nil {
			return fmt.Errorf("cancel the deliveries of an earlier endpoint %s before config.yaml creates it anew: %w", id, err)
		}
		log.Info("cancelled the deliveries of an earlier endpoint before config.yaml creates it anew", "endpoint", id, "cancelled", n)
	}
	return nil
}

// Add marks id's backlog to be cancelled and returns a channel closed once
// it is. The caller holds the catalog lock, having just deleted the
// endpoint.
func (b *backlogs) Add(id string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.ids[id]
	if !ok {
		ch = make(chan struct{})
		b.ids[id] = ch
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return ch
}

// Pending reports whether id's backlog is not yet cancelled.
func (b *backlogs) Pending(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.ids[id]
	return ok
}

// run cancels marked backlogs until ctx ends, retrying failures with
// backoff (up to a minute apart).
func (b *backlogs) run(ctx context.Context) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = time.Second, time.Minute, 0
	for {
		var retry <-chan time.Time
		if b.pass(ctx) {
			bo.Reset()
		} else {
			retry = time.After(bo.NextBackOff())
		}
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		case <-retry:
		}
	}
}

// pass cancels every marked backlog once; false if any failed.
func (b *backlogs) pass(ctx context.Context) bool {
	b.mu.Lock()
	ids := make([]string, 0, len(b.ids))
	for id := range b.ids {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	ok := true
	for _, id := range ids {
		n, err := b.g.store.CancelEndpoint(ctx, id)
		if err != nil {
			if ctx.Err() == nil {
				b.g.log.Error("cancel the deliveries of a deleted endpoint; will retry", "endpoint", id, "cancelled", n, "err", err)
			}
			ok = false
			continue
		}
		if n > 0 {
			b.g.log.Info("cancelled the deliveries of a deleted endpoint", "endpoint", id, "cancelled", n)
		}
		b.mu.Lock()
		close(b.ids[id])
		delete(b.ids, id)
		b.mu.Unlock()
	}
	return ok
}
