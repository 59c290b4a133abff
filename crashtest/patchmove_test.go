package crashtest

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
	"hookgate/storage/badger"
)

// An endpoint PATCHed between two URLs and disabled and enabled again
// while its deliveries are claimed and sent, with the binary SIGKILLed now
// and then: no delivery attempt may reach a URL after the PATCH that moved
// the endpoint away from it (or disabled it) has answered, until a later
// PATCH moves it back (docs/guarantees.md: "a claim whose endpoint
// changed ... is given back ... and claimed again as the endpoint is").
func TestNoAttemptReachesAURLAfterThePatchThatMovedAway(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	rc := newHashReceiver(t)
	sup := newSupervisor(t, buildBinary(t), rc.srv.URL+"/config")
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/endpoints", map[string]any{
		"id": "mover", "tenant": tenantID, "url": rc.srv.URL + "/a", "max_in_flight": 16,
	}, nil)
	if err != nil || st != http.StatusCreated {
		t.Fatalf("POST /endpoints: %d %s %v", st, b, err)
	}

	// Events keep coming, through the admin API (retried across kills).
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for w := range 4 {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				st, _, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events",
					map[string]any{"source": sourceID, "type": "t", "event_id": fmt.Sprintf("w%d-%06d", w, n), "payload": map[string]any{"n": n}}, nil)
				if err != nil || st != http.StatusAccepted {
					sup.waitReady(ctx)
					sleepCtx(ctx, 10*time.Millisecond)
				}
			}
		})
	}

	// closed is a window in which a path must get no attempt: from the
	// answer of the PATCH that moved the endpoint away from it (or disabled
	// it) to the start of the PATCH that brings it back.
	type window struct {
		path       string // "" = every path of the endpoint (disabled)
		from, till time.Time
		what       string
	}
	var windows []window
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 42))
	patch := func(body map[string]any) (start, answered time.Time, ok bool) {
		start = time.Now()
		st, b, _, err := adminCall(sup.client, http.MethodPatch, sup.adminURL+"/api/v1/endpoints/mover", body, nil)
		answered = time.Now()
		if err != nil || st != http.StatusOK {
			t.Logf("PATCH %v: %d %s %v", body, st, excerpt(b, 200), err)
			return start, answered, false
		}
		return start, answered, true
	}
	cur := "/a"
	var open window // the window of the path (or state) left last
	haveOpen := false
	deadline := time.Now().Add(25 * time.Second)
	kills := 0
	for round := 0; time.Now().Before(deadline); round++ {
		time.Sleep(time.Duration(20+rng.IntN(120)) * time.Millisecond)
		var body map[string]any
		var next window
		switch rng.IntN(4) {
		case 0: // disable, then enable at the same URL
			body = map[string]any{"disabled": true}
			next = window{path: "", what: "disabled"}
		default:
			to := map[string]string{"/a": "/b", "/b": "/a"}[cur]
			body = map[string]any{"url": rc.srv.URL + to}
			next = window{path: cur, what: "moved " + cur + " → " + to}
			cur = to
		}
		start, answered, ok := patch(body)
		if !ok {
			break
		}
		if haveOpen {
			open.till = start
			windows = append(windows, open)
		}
		next.from = answered
		open, haveOpen = next, true
		if next.path == "" {
			// Enable again a little later.
			time.Sleep(time.Duration(20+rng.IntN(80)) * time.Millisecond)
			start, answered, ok := patch(map[string]any{"disabled": false})
			if !ok {
				break
			}
			open.till = start
			windows = append(windows, open)
			haveOpen = false
			_ = answered
		}
		if round%15 == 14 && kills < 3 {
			// A kill: everything claimed is released at the restart and
			// sent as the endpoint is now.
			if err := sup.kill(); err != nil {
				t.Fatal(err)
			}
			kills++
			if err := sup.start(); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop()
	wg.Wait()
	if err := sup.stop(); err != nil {
		t.Error(err)
	}
	rc.mu.Lock()
	arrivals := map[string][]time.Time{"/a": rc.arrivals["/a"], "/b": rc.arrivals["/b"]}
	rc.mu.Unlock()
	t.Logf("%d windows, %d kills; attempts at /a %d, /b %d", len(windows), kills, len(arrivals["/a"]), len(arrivals["/b"]))
	type late struct {
		path  string
		after time.Duration
		what  string
	}
	var bad []late
	for _, w := range windows {
		for _, p := range []string{"/a", "/b"} {
			if w.path != "" && w.path != p {
				continue
			}
			for _, at := range arrivals[p] {
				if at.After(w.from) && at.Before(w.till) {
					bad = append(bad, late{p, at.Sub(w.from), w.what})
				}
			}
		}
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].after > bad[j].after })
	if len(bad) > 0 {
		// Not a failure by itself: an attempt written to the network just
		// before the answer may be read by the receiver just after.
		ex := bad[:min(len(bad), 10)]
		t.Logf("%d attempts reached a URL after the PATCH that moved the endpoint away from it (or disabled it) had answered; latest first: %+v",
			len(bad), ex)
	}
	// The attempts the gateway began (storage.Attempt.At, taken when the
	// attempt starts, before its request is built) after such a PATCH had
	// answered: no in-flight race of the network can explain those.
	rc.mu.Lock()
	paths := maps.Clone(rc.paths)
	rc.mu.Unlock()
	db, err := badger.Open(sup.dataDir, badger.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bctx := context.Background()
	var begun []late
	checked := 0
	for cursor := ""; ; {
		ds, next, err := db.ListDeliveries(bctx, storage.DeliveryFilter{Endpoint: "mover", Limit: badger.MaxLimit, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			atts, err := db.ListAttempts(bctx, d.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range atts {
				// The same key goes to the config endpoint too (/config).
				ps := slices.DeleteFunc(slices.Clone(paths[fmt.Sprintf("%s/%d", d.IdempotencyKey, a.N)]),
					func(p string) bool { return p == "/config" })
				if len(ps) != 1 || a.StatusCode != http.StatusOK {
					continue // sent more than once (a kill), or not answered
				}
				checked++
				for _, w := range windows {
					if (w.path == "" || w.path == ps[0]) && a.At.After(w.from) && a.At.Before(w.till) {
						begun = append(begun, late{ps[0], a.At.Sub(w.from), w.what})
					}
				}
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	sort.Slice(begun, func(i, j int) bool { return begun[i].after > begun[j].after })
	t.Logf("%d recorded attempts matched to the URL they reached", checked)
	if len(begun) > 0 {
		t.Errorf("%d attempts were begun by the gateway (attempt.at) after the PATCH that moved the endpoint away from their URL (or disabled it) had answered, and reached it; latest first: %+v",
			len(begun), begun[:min(len(begun), 10)])
	}
	for _, p := range sup.logProblems() {
		t.Errorf("gateway crashed: %s", p)
	}
}
