package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// publishEventIDs publishes n events through POST /events and returns the
// gateway event ids by provider event id.
func publishEventIDs(t *testing.T, sup *supervisor, prefix string, n int) map[string]string {
	t.Helper()
	out := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				eid := fmt.Sprintf("%s%05d", prefix, i)
				st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events",
					map[string]any{"source": sourceID, "type": "t", "event_id": eid, "payload": map[string]any{"n": i}}, nil)
				var v struct{ ID string }
				if err != nil || st != http.StatusAccepted || json.Unmarshal(b, &v) != nil {
					t.Errorf("publish %s: %d %s %v", eid, st, b, err)
					continue
				}
				mu.Lock()
				out[eid] = v.ID
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// POST /events/{id}/replay with an Idempotency-Key, SIGKILLed while many
// run: each key retried until it has an outcome must have made exactly one
// replayed delivery (the admin API's idempotency contract: the request is
// executed once per key; the bulk replay and POST /endpoints derive their
// ids from the key for exactly this reason).
func TestKillDuringIdempotentEventReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const n = 400
	rc, sup := startWithReceiver(t)
	ids := publishEventIDs(t, sup, "e", n)
	waitUntil(t, 30*time.Second, "the original deliveries", func() bool { return len(rc.keys()) == n })

	type post struct {
		eid, gid, key string
		answers       []string
	}
	var posts []*post
	for eid, gid := range ids {
		posts = append(posts, &post{eid: eid, gid: gid, key: "replay-" + eid})
	}
	do := func(p *post) (int, error) {
		st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events/"+p.gid+"/replay",
			map[string]any{"endpoints": []string{endpointID}}, map[string]string{"Idempotency-Key": p.key})
		if err != nil {
			p.answers = append(p.answers, err.Error())
			return 0, err
		}
		p.answers = append(p.answers, fmt.Sprintf("%d %.80s", st, b))
		return st, nil
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	var wg sync.WaitGroup
	var ok atomic.Int32
	for _, p := range posts {
		wg.Go(func() {
			if st, _ := do(p); st == http.StatusAccepted {
				ok.Add(1)
			}
		})
	}
	// Kill once a few replays were answered: the others are between
	// their delivery write and their key's answer write, or before both.
	threshold := int32(5 + rng.IntN(40))
	waitUntil(t, 20*time.Second, "first replays answered", func() bool { return ok.Load() >= threshold })
	if err := sup.kill(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	answered := 0
	for _, p := range posts {
		if len(p.answers) > 0 && p.answers[0][0] == '2' {
			answered++
		}
	}
	t.Logf("%d of %d replays answered before the kill", answered, n)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	for _, p := range posts {
		wg.Go(func() {
			for ctx.Err() == nil {
				st, err := do(p)
				if err == nil && st != http.StatusConflict && st < 500 {
					if st != http.StatusAccepted {
						t.Errorf("key %s: retry answered %v", p.key, p.answers)
					}
					return
				}
				sleepCtx(ctx, 500*time.Millisecond)
			}
			t.Errorf("key %s: no outcome within 45 s: %v", p.key, p.answers)
		})
	}
	wg.Wait()
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for eid, ds := range storedDeliveries(t, sup.dataDir) {
		if len(ds) != 2 {
			bad++
			if bad <= 3 {
				t.Errorf("event %s has %d deliveries, want the original + 1 replay (one Idempotency-Key, one replay)", eid, len(ds))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d events were replayed more than once for one Idempotency-Key", bad, n)
	}
}
