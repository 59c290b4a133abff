package gateway

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
)

// GET /events and GET /deliveries are "newest first": received_at (and a
// delivery's created_at) never increases down the list, also among
// records made within one millisecond. Lists are a reverse scan of the
// IDs; until IDs held the time below the millisecond, about a third of
// adjacent events of a concurrent ingest were listed oldest-first.
func TestAdminListsAreNewestFirstWithinAMillisecond(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: sink, tenant: acme, url: %q}\n", rcv.url("sink"))})
	type rec struct{ id, at string }
	parse := func(s string) time.Time {
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatalf("time %q: %v", s, err)
		}
		return ts
	}
	// sameMs counts pairs of records, adjacent in time, made within one
	// millisecond: the cases where the ID alone cannot order them.
	sameMs := func(rs []rec) int {
		ts := make([]time.Time, len(rs))
		for i := range rs {
			ts[i] = parse(rs[i].at)
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		n := 0
		for i := 1; i < len(ts); i++ {
			if ts[i].UnixMilli() == ts[i-1].UnixMilli() && !ts[i].Equal(ts[i-1]) {
				n++
			}
		}
		return n
	}
	events := func() []rec {
		l := must[apiList[eventView]](t, 200)(g.api("GET", "/events?limit=1000", opToken, nil))
		out := make([]rec, len(l.Data))
		for i, e := range l.Data {
			out[i] = rec{e.ID, e.ReceivedAt}
		}
		return out
	}
	// Concurrent ingests until enough of them share a millisecond.
	sent := 0
	deadline := time.Now().Add(20 * time.Second)
	for round := 0; sameMs(events()) < 20; round++ {
		if time.Now().After(deadline) || round == 10 {
			t.Skipf("only %d same-millisecond pairs after %d events: cannot probe the order", sameMs(events()), sent)
		}
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.post("open", fmt.Appendf(nil, `{"id":"ord-%d-%d","type":"t"}`, round, i), nil)
			}()
		}
		wg.Wait()
		sent += 32
	}
	check := func(what string, rs []rec) {
		t.Helper()
		bad := 0
		for i := 1; i < len(rs); i++ {
			if parse(rs[i].at).After(parse(rs[i-1].at)) {
				if bad < 3 {
					t.Errorf("%s: %s (%s) is listed before the newer %s (%s)", what, rs[i-1].id, rs[i-1].at, rs[i].id, rs[i].at)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d adjacent pairs are oldest-first; want newest first", what, bad, len(rs)-1)
		}
	}
	check("GET /events", events())
	// The deliveries of those events (one each, to sink), likewise.
	waitFor(t, 20*time.Second, "a delivery per event", func() bool {
		return len(must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?limit=1000", opToken, nil)).Data) == len(events())
	})
	dl := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?limit=1000", opToken, nil))
	ds := make([]rec, len(dl.Data))
	for i, d := range dl.Data {
		ds[i] = rec{d.ID, d.CreatedAt}
	}
	check("GET /deliveries", ds)
}
