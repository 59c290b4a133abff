package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
)

// heldIdleClaimStore holds the claims of one endpoint until released, as a
// busy disk does: a claim is a durable write, queued behind the group
// commit's batches and their fsync.
type heldIdleClaimStore struct {
	storage.Store
	endpoint string
	arrived  chan struct{}
	once     sync.Once
	release  chan struct{}
}

func (s *heldIdleClaimStore) Claim(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration) ([]storage.Job, error) {
	if endpoint == s.endpoint {
		s.once.Do(func() { close(s.arrived) })
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Claim(ctx, endpoint, now, limit, lease)
}

// TestInFlightGaugeCountsOnlyAttempts: hookgate_delivery_in_flight
// ("Delivery attempts in flight, by endpoint") counted the slots an
// endpoint loop reserves for a claim before the claim is written, until
// the claim returned. An endpoint with nothing to deliver claims every
// second, so for the length of each claim (a durable write, behind the
// ingest batches under load) an idle endpoint showed max_in_flight
// attempts: an alert on in_flight >= max_in_flight fired falsely. Only
// attempts move the gauge now.
func TestInFlightGaugeCountsOnlyAttempts(t *testing.T) {
	rcv := newReceiver(t)
	s := &heldIdleClaimStore{endpoint: "idle", arrived: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(s.release) }) }
	g := startGateway(t, gwOptions{
		extra:     fmt.Sprintf("endpoints:\n  - {id: idle, tenant: globex, url: %q}\n", rcv.url("idle")),
		wrapStore: func(inner storage.Store) storage.Store { s.Store = inner; return s },
	})
	t.Cleanup(unblock)
	select {
	case <-s.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the endpoint loop never claimed")
	}
	text := scrapeMetrics(t, g)
	unblock()
	if !strings.Contains(text, `hookgate_outbox_pending{endpoint="idle"} 0`) || rcv.count() != 0 {
		t.Fatalf("the endpoint was meant to have nothing to deliver; receiver got %d:\n%s", rcv.count(), text)
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, `hookgate_delivery_in_flight{endpoint="idle"}`) && line != `hookgate_delivery_in_flight{endpoint="idle"} 0` {
			t.Fatalf("no event, no delivery, no attempt; /metrics says %q", line)
		}
	}
}
