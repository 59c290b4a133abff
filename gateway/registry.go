package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"hookgate/gateway/admin"
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
	// inUse is held (read side) by whoever writes deliveries for the
	// endpoints of a snapshot, from reading the snapshot until the write is
	// done, and (write side) by an endpoint's delete. Without it an ingest
	// that read the snapshot before a delete could write its delivery after
	// the delete had cancelled the endpoint's deliveries: a delivery left
	// pending for an endpoint that no longer exists.
	inUse sync.RWMutex
}

type snapshot struct {
	sources   map[string]*inbound.Source
	endpoints []storage.Endpoint
	// byTenant lists the endpoints of each tenant, for fan-out.
	byTenant map[string][]storage.Endpoint
}

// endpoint returns endpoint id of tenant, or nil.
func (s *snapshot) endpoint(tenant, id string) *storage.Endpoint {
	eps := s.byTenant[tenant]
	if i := slices.IndexFunc(eps, func(ep storage.Endpoint) bool { return ep.ID == id }); i >= 0 {
		return &eps[i]
	}
	return nil
}

func newRegistry(store storage.Catalog, log *slog.Logger) *registry {
	r := &registry{store: store, log: log}
	r.snap.Store(&snapshot{sources: map[string]*inbound.Source{}, byTenant: map[string][]storage.Endpoint{}})
	return r
}

// reload rebuilds the snapshot from the store. A stored source that no
// longer compiles is left out (and logged): it answers 404, never unverified.
// publish, if not nil, hands the new snapshot to the other in-memory views
// (the dispatcher's endpoints) before the next reload may start, so that
// two reloads racing cannot leave the older snapshot published last.
func (r *registry) reload(ctx context.Context, publish func(*snapshot)) (*snapshot, error) {
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
	if publish != nil {
		publish(s)
	}
	return s, nil
}

func (r *registry) current() *snapshot { return r.snap.Load() }

// use returns the current snapshot for a write of deliveries to its
// endpoints; call done once that write has returned.
func (r *registry) use() (snap *snapshot, done func()) {
	r.inUse.RLock()
	return r.snap.Load(), r.inUse.RUnlock
}

// exclusive runs fn while no one writes deliveries from a snapshot.
func (r *registry) exclusive(fn func() error) error {
	r.inUse.Lock()
	defer r.inUse.Unlock()
	return fn()
}

// view is s as the admin API reads it.
func (s *snapshot) view() admin.View {
	return admin.View{Sources: s.sources, Endpoints: s.endpoints, ByTenant: s.byTenant}
}
