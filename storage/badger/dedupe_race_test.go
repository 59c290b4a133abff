package badger

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
)

// Concurrent Accepts of one dedupe key with different
// bodies (a provider resending a changed payload under the same event id,
// racing its first send). Exactly one event is stored; requests with the
// winner's body are replays of its answer, the others
// ErrIdempotencyMismatch. The suite races only identical bodies.
func TestAcceptOfOneKeyWithDifferentBodiesConcurrently(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	const n = 48
	type result struct {
		body string
		res  storage.IngestResult
		err  error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"v":%d}`, i%3)
			req := acceptRequest("same", body, now, "ep1")
			req.Response.Body = []byte(body)
			res, err := db.Ingest(ctx, req)
			results[i] = result{body, res, err}
		})
	}
	wg.Wait()
	winner := ""
	for _, r := range results {
		if r.err == nil && !r.res.Replayed {
			if winner != "" {
				t.Fatalf("two requests stored as new: %s and %s", winner, r.body)
			}
			winner = r.body
		}
	}
	if winner == "" {
		t.Fatal("no request was stored")
	}
	for _, r := range results {
		switch {
		case r.body == winner:
			if r.err != nil || string(r.res.Response.Body) != winner {
				t.Fatalf("same body as the stored one: %+v %v", r.res, r.err)
			}
		case !errors.Is(r.err, storage.ErrIdempotencyMismatch):
			t.Fatalf("body %s after %s was stored: %+v %v, want ErrIdempotencyMismatch", r.body, winner, r.res, r.err)
		}
	}
	evs, _, err := db.ListEvents(ctx, storage.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	ds, _, err := db.ListDeliveries(ctx, storage.DeliveryFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || len(ds) != 1 || string(evs[0].Body) != winner {
		t.Fatalf("stored %d events and %d deliveries (want 1, 1, body %s)", len(evs), len(ds), winner)
	}
	// And afterwards, from the fast path too (the key is recent now).
	late := acceptRequest("same", winner, now.Add(time.Second), "ep1")
	if res, err := db.Ingest(ctx, late); err != nil || !res.Replayed || string(res.Response.Body) != winner {
		t.Fatalf("a resend after the race: %+v %v", res, err)
	}
	other := acceptRequest("same", `{"v":"other"}`, now.Add(time.Second), "ep1")
	if _, err := db.Ingest(ctx, other); !errors.Is(err, storage.ErrIdempotencyMismatch) {
		t.Fatalf("another body after the race: %v", err)
	}
}

// Concurrent ClaimKeys of one key by different requests:
// one executes, every other is IdemMismatch (never a second IdemNew, nor
// IdemInProgress, which would invite the client to retry a reuse).
func TestClaimKeyByDifferentRequestsConcurrently(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	const n = 40
	states := make([]storage.IdemState, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := db.ClaimKey(ctx, storage.IdemClaim{Tenant: "acme", Key: "k", RequestHash: sha256.Sum256([]byte(fmt.Sprint(i))),
				Now: now, LeaseUntil: now.Add(time.Minute), Remember: now.Add(time.Hour)})
			if err != nil {
				t.Error(err)
			}
			states[i] = r.State
		})
	}
	wg.Wait()
	won := 0
	for i, s := range states {
		switch s {
		case storage.IdemNew:
			won++
		case storage.IdemMismatch:
		default:
			t.Errorf("claim %d: state %v, want IdemMismatch", i, s)
		}
	}
	if won != 1 {
		t.Fatalf("%d different requests won the key, want 1", won)
	}
}

// The holder's FinishKey racing a same-request takeover
// after its lease ran out: exactly one of them ends up holding the key,
// and the stored answer (if any) is the one of the request that still
// held it.
func TestFinishKeyRacesATakeover(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	base := time.Now().UTC()
	h := sha256.Sum256([]byte("req"))
	for round := range 30 {
		key := fmt.Sprint("k", round)
		first, err := db.ClaimKey(ctx, storage.IdemClaim{Tenant: "acme", Key: key, RequestHash: h, Now: base,
			LeaseUntil: base.Add(30 * time.Second), Remember: base.Add(time.Hour)})
		if err != nil || first.State != storage.IdemNew {
			t.Fatalf("claim: %+v %v", first, err)
		}
		at := base.Add(31 * time.Second)
		var wg sync.WaitGroup
		var ferr error
		var took storage.IdemResult
		wg.Go(func() {
			ferr = db.FinishKey(ctx, "acme", key, first.LeaseUntil, storage.Response{Status: 201, Body: []byte("first")}, base.Add(time.Hour))
		})
		wg.Go(func() {
			took, _ = db.ClaimKey(ctx, storage.IdemClaim{Tenant: "acme", Key: key, RequestHash: h, Now: at,
				LeaseUntil: at.Add(30 * time.Second), Remember: at.Add(time.Hour)})
		})
		wg.Wait()
		probe, err := db.ClaimKey(ctx, storage.IdemClaim{Tenant: "acme", Key: key, RequestHash: h, Now: at.Add(time.Second),
			LeaseUntil: at.Add(31 * time.Second), Remember: at.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ferr == nil && took.State == storage.IdemReplay:
			if probe.State != storage.IdemReplay || string(probe.Response.Body) != "first" {
				t.Fatalf("round %d: answer stored, then %+v", round, probe)
			}
		case errors.Is(ferr, storage.ErrLeaseLost) && took.State == storage.IdemNew:
			if probe.State != storage.IdemInProgress || !took.Since.Equal(base) {
				t.Fatalf("round %d: taken over (since %v), then %+v", round, took.Since, probe)
			}
		default:
			t.Fatalf("round %d: finish %v and takeover %+v", round, ferr, took)
		}
	}
}
