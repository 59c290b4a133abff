package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// POST /sources and POST /endpoints with a client-chosen id, each sent
// with an Idempotency-Key, SIGKILLed while they run. The client retries
// each key until it has an outcome, as the SPEC invites ("if the process
// dies mid-request, the claim expires after a lease and the next retry
// executes it"). Every one of them created its resource (it is in the
// store), so every key's outcome must be 201: a 409 "already exists"
// tells the client its create failed when it did not, and that 409 is
// then stored as the key's answer for dedupe.ttl.
func TestKillDuringIdempotentCreateWithID(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const n = 150
	rc, sup := startWithReceiver(t)
	type post struct {
		key, path, id string
		body          map[string]any
		mu            sync.Mutex
		answers       []string
	}
	var posts []*post
	mk := func(round, i int) []*post {
		id := fmt.Sprintf("src-%d-%03d", round, i)
		a := &post{key: "k-" + id, path: "/api/v1/sources", id: id, body: map[string]any{
			"id": id, "tenant": tenantID, "verify": map[string]any{"scheme": "standard-webhooks", "secrets": []string{sourceSecret}}}}
		id = fmt.Sprintf("ep-%d-%03d", round, i)
		b := &post{key: "k-" + id, path: "/api/v1/endpoints", id: id, body: map[string]any{
			"id": id, "tenant": tenantID, "url": rc.srv.URL + "/" + id, "event_types": []string{"none"}}}
		return []*post{a, b}
	}
	do := func(p *post) (int, error) {
		st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+p.path, p.body, map[string]string{"Idempotency-Key": p.key})
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			p.answers = append(p.answers, "error")
			return 0, err
		}
		p.answers = append(p.answers, fmt.Sprintf("%d %.90s", st, strings.TrimSpace(string(b))))
		return st, nil
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	const rounds = 3
	for round := range rounds {
		var batch []*post
		for i := range n / rounds {
			batch = append(batch, mk(round, i)...)
		}
		posts = append(posts, batch...)
		var ok atomic.Int32
		var wg sync.WaitGroup
		for _, p := range batch {
			wg.Go(func() {
				if st, _ := do(p); st == http.StatusCreated {
					ok.Add(1)
				}
			})
		}
		threshold := int32(5 + rng.IntN(30))
		waitUntil(t, 20*time.Second, "first creates answered", func() bool { return ok.Load() >= threshold })
		if err := sup.kill(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		t.Logf("round %d: %d of %d creates answered 201 before the kill", round, ok.Load(), len(batch))
		if err := sup.start(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var bad atomic.Int32
	for _, p := range posts {
		wg.Go(func() {
			for ctx.Err() == nil {
				st, err := do(p)
				if err == nil && st != http.StatusConflict || err == nil && st == http.StatusConflict && !strings.Contains(p.answers[len(p.answers)-1], "in-progress") {
					if st != http.StatusCreated {
						if bad.Add(1) <= 6 {
							p.mu.Lock()
							t.Errorf("key %s (%s %s): outcome after the kill is not 201: %d answers, first %q, last %q", p.key, p.path, p.id, len(p.answers), p.answers[0], p.answers[len(p.answers)-1])
							p.mu.Unlock()
						}
					}
					return
				}
				sleepCtx(ctx, 500*time.Millisecond)
			}
			t.Errorf("key %s: no outcome within 45 s: %v", p.key, p.answers)
		})
	}
	wg.Wait()
	missing := 0
	for _, p := range posts {
		st, _, _, _ := adminCall(sup.client, http.MethodGet, sup.adminURL+p.path+"/"+p.id, nil, nil)
		if st != http.StatusOK {
			missing++
		}
	}
	for _, p := range posts {
		st, b, h, _ := adminCall(sup.client, http.MethodPost, sup.adminURL+p.path, p.body, map[string]string{"Idempotency-Key": p.key})
		if st != http.StatusCreated {
			t.Errorf("key %s once more: %d (Idempotent-Replayed %q) %.70s", p.key, st, h.Get("Idempotent-Replayed"), b)
			break
		}
	}
	if b := bad.Load(); b > 0 {
		t.Errorf("%d of %d idempotent creates answered other than 201 on retry after the kill; %d resources missing from the store", b, len(posts), missing)
	}
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
}
