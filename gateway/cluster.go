package gateway

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"

	"hookgate/storage"
)

// Several gateways on one store (storage.Cluster, the Postgres engine)
// share its data but not their memory. What each keeps in memory is
// brought in line here:
//   - the catalog (sources, endpoints): watchCatalog reloads it when any
//     gateway changed it, within catalogPollEvery;
//   - config.yaml is applied under a cluster lock, so that concurrent
//     starts take turns and the later ones find the work done;
//   - endpoints' rate limits, circuits and receivers' pauses are the
//     store's (storage.Gates): the dispatcher claims through them;
//   - new deliveries: the dispatcher of the gateway that wrote them is
//     woken, and the others hear of them through the store (Announce,
//     Listen: NOTIFY on Postgres), polling while they cannot;
//   - background work (retention, each bulk replay) runs under a lock of
//     its own, so it runs once across the gateways, and a job whose
//     gateway died is taken over when its lock is released.
//
// With an embedded store there is one gateway: the locks are no-ops.

// catalogPollEvery is how often a gateway on a shared store checks the
// catalog version: a change through any gateway is in force everywhere
// within about this long (SPEC: 2 s).
var catalogPollEvery = 500 * time.Millisecond

// Names of the cluster locks.
const (
	lockConfig    = "config"
	lockRetention = "retention"
	lockReplay    = "replay/" // + the job id
)

// cluster returns the store's cluster side, if it is shared.
func (g *Gateway) cluster() (storage.Cluster, bool) {
	c, ok := g.store.(storage.Cluster)
	return c, ok
}

// gates returns the store's endpoint gates when it is shared and keeps
// them; nil on an embedded store, whose dispatcher keeps its own.
func (g *Gateway) gates() storage.Gates {
	if _, shared := g.cluster(); !shared {
		return nil
	}
	gs, _ := g.store.(storage.Gates)
	return gs
}

// lockCluster waits for the named lock on a shared store; on an embedded
// one it returns at once.
func (g *Gateway) lockCluster(ctx context.Context, name string) (unlock func(), err error) {
	c, ok := g.cluster()
	if !ok {
		return func() {}, nil
	}
	unlock, _, err = c.Lock(ctx, name)
	return unlock, err
}

// tryLockCluster takes the named lock if it is free. lost is closed when
// the lock is lost (nil, never closed, on an embedded store).
func (g *Gateway) tryLockCluster(ctx context.Context, name string) (unlock func(), lost <-chan struct{}, ok bool, err error) {
	c, shared := g.cluster()
	if !shared {
		return func() {}, nil, true, nil
	}
	return c.TryLock(ctx, name)
}

// watchCatalog reloads the registry whenever the catalog version changes,
// until ctx ends. The version is read before the reload it may trigger,
// so a change made while a reload runs is caught by the next tick. A
// failed read is tried again at the next tick.
func (g *Gateway) watchCatalog(ctx context.Context, c storage.Cluster) {
	t := time.NewTicker(catalogPollEvery)
	defer t.Stop()
	// The first tick reloads whatever it reads: a change between the
	// start's load of the catalog and this loop's first read would
	// otherwise look like the version the gateway started with.
	var seen int64
	known := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v, err := c.CatalogVersion(ctx)
		if err != nil {
			continue
		}
		if !known || v != seen {
			g.reloadRegistry()
		}
		seen, known = v, true
	}
}

// announcer is the dispatcher of a gateway on a shared store: the
// endpoints it is told have new deliveries are announced to the other
// gateways too, so that whichever has a free slot claims them at once.
type announcer struct {
	dispatcher
	c storage.Cluster
}

// Notify wakes this gateway's loops of the endpoints and announces them.
// A Notify of every endpoint (none named) is this gateway's own.
func (a announcer) Notify(endpoints ...string) {
	a.dispatcher.Notify(endpoints...)
	if len(endpoints) > 0 {
		a.c.Announce(endpoints...)
	}
}

// announceNotices is the dispatcher's OnNotice: on a shared store, the
// other gateways are woken for the recipients of operational events this
// one stored.
func (g *Gateway) announceNotices() func([]string) {
	c, shared := g.cluster()
	if !shared {
		return nil
	}
	return func(endpoints []string) { c.Announce(endpoints...) }
}

// listenWakes wakes this gateway's loops of the endpoints other gateways
// announce, until ctx ends. While the store cannot tell it (its
// connection dropped) the loops poll; when it listens again every loop
// looks at once, for what was announced meanwhile.
func (g *Gateway) listenWakes(ctx context.Context, c storage.Cluster) {
	local := g.disp
	if a, ok := local.(announcer); ok {
		local = a.dispatcher // what it hears is not announced again
	}
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval, retry.MaxInterval, retry.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
	for {
		began := time.Now()
		err := c.Listen(ctx, func(endpoints []string) { local.Notify(endpoints...) })
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > time.Minute {
			retry.Reset()
		}
		g.log.Warn("not hearing the other gateways' new deliveries; polling until the store tells again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry.NextBackOff()):
		}
		local.Notify()
	}
}
