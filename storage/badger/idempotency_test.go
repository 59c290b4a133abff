package badger

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"hookgate/storage"
)

// An admin Idempotency-Key claimed by a process that stopped before the
// request finished is released when the store opens again: the retry of
// the same request executes at once (it answered 409 until the dead 30 s
// lease ended), continuing the same use of the key (the same Since, so
// what it creates gets the same name), while another request under the
// key is still a reuse, and finished keys still replay.
func TestOpenReleasesIdempotencyKeysOfAnEarlierProcess(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	lease := now.Add(30 * time.Second)
	remember := now.Add(time.Hour)
	h := sha256.Sum256([]byte("POST /endpoints {}"))
	other := sha256.Sum256([]byte("POST /endpoints {\"url\":\"x\"}"))
	claim := func(db *DB, key string, h [32]byte, at time.Time) storage.IdemResult {
		t.Helper()
		r, err := db.ClaimKey(ctx, storage.IdemClaim{Tenant: "acme", Key: key, RequestHash: h, Now: at, LeaseUntil: at.Add(30 * time.Second), Remember: remember})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, k := range []string{"held", "held-2", "done"} {
		if r := claim(db, k, h, now); r.State != storage.IdemNew {
			t.Fatalf("first claim of %s: state %v", k, r.State)
		}
	}
	if err := db.FinishKey(ctx, "acme", "done", lease, storage.Response{Status: 201, Body: []byte(`{"id":"ep_1"}`)}, remember); err != nil {
		t.Fatal(err)
	}
	if r := claim(db, "held", h, now.Add(time.Second)); r.State != storage.IdemInProgress {
		t.Fatalf("held key before the restart: state %v, want in progress", r.State)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	soon := now.Add(2 * time.Second) // well inside the dead lease
	r := claim(db, "held", h, soon)
	if r.State != storage.IdemNew || !r.Since.Equal(now) {
		t.Fatalf("retry after the restart: state %v since %v; want new, continuing the use begun at %v", r.State, r.Since, now)
	}
	if r := claim(db, "held-2", other, soon); r.State != storage.IdemMismatch {
		t.Fatalf("another request under a released key: state %v, want mismatch", r.State)
	}
	if r := claim(db, "done", h, soon); r.State != storage.IdemReplay || r.Response.Status != 201 || string(r.Response.Body) != `{"id":"ep_1"}` {
		t.Fatalf("finished key after the restart: %+v, want its stored answer", r)
	}
	// The retry that took "held" over holds it now, as any claim does.
	if r := claim(db, "held", h, soon.Add(time.Second)); r.State != storage.IdemInProgress {
		t.Fatalf("second retry while the first runs: state %v, want in progress", r.State)
	}
}
