package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
	"hookgate/storage/badger"
)

// Idempotent admin POSTs (POST /endpoints without an id, POST /replays)
// in flight when the binary is SIGKILLed: once it is back, each is retried
// with its Idempotency-Key until it has an outcome. The store releases the
// dead process's claims when it opens, so the first retry of each key
// must not be "in progress" (409 with Retry-After, for the dead process's
// 30 s lease,  in an earlier version). Each key then made exactly one endpoint
// or one replay job (SPEC section 5: "if the process dies mid-request, the
// claim expires after a lease and the next retry executes it"; ids derived
// from the key's use), every replay job ran to completion once, and each
// event has one delivery per replay job plus its original.
func TestKillDuringIdempotentAdminPosts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const (
		events    = 300
		endpoints = 24
		replays   = 6
	)
	rc, sup := startWithReceiver(t)
	publishEvents(t, sup, "e", events)
	waitUntil(t, 30*time.Second, "the original deliveries", func() bool { return len(rc.keys()) == events })

	type post struct {
		key, path string
		body      map[string]any
		mu        sync.Mutex
		answers   []string // status and id of each answer
		id        string
	}
	var posts []*post
	base := time.Now().UTC()
	for i := range endpoints {
		posts = append(posts, &post{key: fmt.Sprintf("ep-key-%d", i), path: "/api/v1/endpoints",
			body: map[string]any{"tenant": tenantID, "url": rc.srv.URL + "/ep/" + strconv.Itoa(i), "event_types": []string{"none." + strconv.Itoa(i)}}})
	}
	for i := range replays {
		// Distinct until bounds (all after every event) tell the jobs apart.
		posts = append(posts, &post{key: fmt.Sprintf("rpl-key-%d", i), path: "/api/v1/replays",
			body: map[string]any{"source": sourceID, "endpoint": endpointID,
				"until": base.Add(time.Duration(i+1) * time.Hour).Format(time.RFC3339Nano)}})
	}
	do := func(p *post) (int, error) {
		st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+p.path, p.body, map[string]string{"Idempotency-Key": p.key})
		if err != nil {
			return 0, err
		}
		var v struct{ ID string }
		_ = json.Unmarshal(b, &v)
		p.mu.Lock()
		p.answers = append(p.answers, fmt.Sprintf("%d %s", st, v.ID))
		if st/100 == 2 {
			if p.id != "" && p.id != v.ID {
				t.Errorf("key %s answered %s, then %s", p.key, p.id, v.ID)
			}
			p.id = v.ID
		}
		p.mu.Unlock()
		return st, nil
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 41))
	var wg sync.WaitGroup
	for _, p := range posts {
		wg.Go(func() { _, _ = do(p) })
	}
	time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
	if err := sup.kill(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	cut := 0
	for _, p := range posts {
		if len(p.answers) == 0 {
			cut++
		}
	}
	t.Logf("%d of %d requests cut by the kill", cut, len(posts))
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	// Retry every key until it has an outcome.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	for _, p := range posts {
		wg.Go(func() {
			first := true
			for ctx.Err() == nil {
				st, err := do(p)
				if err == nil && first && st == http.StatusConflict {
					t.Errorf("key %s: the first retry after the restart answered 409: the dead process's claim was not released at start", p.key)
				}
				first = first && err != nil
				if err == nil && st != http.StatusConflict && st < 500 {
					if st/100 != 2 {
						t.Errorf("key %s: retry answered %d", p.key, st)
					}
					return
				}
				sleepCtx(ctx, 500*time.Millisecond)
			}
			t.Errorf("key %s: no outcome within 45 s: %v", p.key, p.answers)
		})
	}
	wg.Wait()
	for _, p := range posts[endpoints:] {
		waitUntil(t, 30*time.Second, "replay "+p.id+" to complete", func() bool {
			j, err := getReplay(sup, p.id)
			return err == nil && j.State != "running"
		})
	}
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}

	db, err := badger.Open(sup.dataDir, badger.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx2 := context.Background()
	eps, err := db.ListEndpoints(ctx2)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := db.ListReplays(ctx2, "")
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	byURL := map[string][]string{}
	for _, ep := range eps {
		byURL[ep.URL] = append(byURL[ep.URL], ep.ID)
	}
	for i, p := range posts[:endpoints] {
		u := rc.srv.URL + "/ep/" + strconv.Itoa(i)
		if ids := byURL[u]; len(ids) != 1 || ids[0] != p.id {
			t.Errorf("key %s: endpoints %v in the store, answered %q (answers %v)", p.key, ids, p.id, p.answers)
		}
	}
	byUntil := map[string][]storage.ReplayJob{}
	for _, j := range jobs {
		byUntil[j.Until.UTC().Format(time.RFC3339Nano)] = append(byUntil[j.Until.UTC().Format(time.RFC3339Nano)], j)
	}
	for _, p := range posts[endpoints:] {
		js := byUntil[p.body["until"].(string)]
		if len(js) != 1 || js[0].ID != p.id || js[0].State != storage.ReplayCompleted || js[0].Matched != events {
			t.Errorf("key %s: jobs %+v in the store, answered %q (answers %v)", p.key, js, p.id, p.answers)
		}
	}
	for id, ds := range storedDeliveries(t, sup.dataDir) {
		if len(ds) != 1+replays {
			t.Errorf("event %s has %d deliveries, want 1 + %d replays", id, len(ds), replays)
		}
	}
	for _, p := range sup.logProblems() {
		t.Errorf("gateway crashed: %s", p)
	}
}
