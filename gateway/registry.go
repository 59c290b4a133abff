package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"hookgate/inbound"
	"hookgate/storage"
)

// registry is the in-memory view of sources and endpoints that the ingest
// hot path reads without touching the store. The store is the truth: every
// change is written there first, then the registry is rebuilt from it.
type registry struct {
	store storage.Catalog
	log   *slog.Logger
	snap  atomic.Pointer[snapshot]
	mu    sync.Mutex // serialises reloads
}

type snapshot struct {
	sources   map[string]*inbound.Source
	endpoints []storage.Endpoint
	// byTenant lists the endpoints of each tenant, for fan-out.
	byTenant map[string][]storage.Endpoint
}

func newRegistry(store storage.Catalog, log *slog.Logger) *registry {
	r := &registry{store: store, log: log}
	r.snap.Store(&snapshot{sources: map[string]*inbound.Source{}, byTenant: map[string][]storage.Endpoint{}})
	return r
}

// reload rebuilds the snapshot from the store. A stored source that no
// longer compiles is left out (and logged): it answers 404, never unverified.
func (r *registry) reload(ctx context.Context) (*snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	srcs, err := r.store.ListSources(ctx)
	if err != nil {
		return nil, fmt.Errorf("list sources: %w", err)
	}
	eps, err := r.store.ListEndpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	s := &snapshot{sources: make(map[string]*inbound.Source, len(srcs)), endpoints: eps, byTenant: map[string][]storage.Endpoint{}}
	for _, src := range srcs {
		c, err := inbound.CompileSource(src)
		if err != nil {
			r.log.Error("source left out: its stored config is invalid", "source", src.ID, "err", err)
			continue
		}
		s.sources[src.ID] = c
	}
	for _, ep := range eps {
		s.byTenant[ep.Tenant] = append(s.byTenant[ep.Tenant], ep)
	}
	r.snap.Store(s)
	return s, nil
}

func (r *registry) current() *snapshot { return r.snap.Load() }
