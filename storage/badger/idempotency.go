package badger

import (
	"context"
	"errors"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// idemRecord is an admin Idempotency-Key: running under a lease, or done
// with its stored response until Expires.
// A claim's Expires is how long its use of the key is remembered
// (IdemClaim.Remember); Since is when that use began (IdemResult.Since).
type idemRecord struct {
	Hash       [32]byte         `json:"h"`
	Done       bool             `json:"d"`
	LeaseUntil time.Time        `json:"l,omitzero"`
	Response   storage.Response `json:"r"`
	Expires    time.Time        `json:"x"`
	Since      time.Time        `json:"s,omitzero"`
}

// ClaimKey atomically claims (tenant, key) for one request.
func (db *DB) ClaimKey(ctx context.Context, c storage.IdemClaim) (storage.IdemResult, error) {
	var res storage.IdemResult
	k := idemKey(c.Tenant, c.Key)
	err := db.update(ctx, 256, func(txn *bdg.Txn) error {
		var rec idemRecord
		err := getRecord(txn, k, &rec)
		// While a record is remembered (its lease or its Expires), the key
		// is its request's. A claim left behind by a dead run, or given up
		// after a 5xx, may have had its effect, so another request under
		// it is a reuse there too.
		remembered := err == nil && (c.Now.Before(rec.Expires) || !rec.Done && c.Now.Before(rec.LeaseUntil))
		switch {
		case errors.Is(err, storage.ErrNotFound):
		case err != nil:
			return err
		case remembered && rec.Hash != c.RequestHash:
			res = storage.IdemResult{State: storage.IdemMismatch}
			return nil
		case rec.Done && remembered:
			res = storage.IdemResult{State: storage.IdemReplay, Response: rec.Response}
			return nil
		case !rec.Done && c.Now.Before(rec.LeaseUntil):
			res = storage.IdemResult{State: storage.IdemInProgress, LeaseUntil: rec.LeaseUntil}
			return nil
		}
		// Absent, expired, or a claim of this same request left behind by
		// a dead run (or given up after a 5xx): take it, continuing that
		// use of the key.
		since := c.Now
		if remembered && !rec.Done && !rec.Since.IsZero() {
			since = rec.Since
		}
		keep := c.LeaseUntil
		if c.Remember.After(keep) {
			keep = c.Remember
		}
		res = storage.IdemResult{State: storage.IdemNew, LeaseUntil: c.LeaseUntil, Since: since}
		rec = idemRecord{Hash: c.RequestHash, LeaseUntil: c.LeaseUntil, Expires: keep, Since: since}
		return putRecordUntil(txn, k, &rec, time.Now().Add(keep.Sub(c.Now)))
	})
	return res, err
}

// FinishKey stores the response of a key claimed under lease until
// expires.
func (db *DB) FinishKey(ctx context.Context, tenant, key string, lease time.Time, resp storage.Response, expires time.Time) error {
	k := idemKey(tenant, key)
	return db.update(ctx, 256+len(resp.Body), func(txn *bdg.Txn) error {
		rec, err := heldKey(txn, k, lease)
		if err != nil {
			return err
		}
		rec.Done, rec.LeaseUntil, rec.Response, rec.Expires = true, time.Time{}, resp, expires
		return putRecordUntil(txn, k, &rec, expires)
	})
}

// AbandonKey ends a claim so that a retry executes the request again. Its
// use of the key is remembered (a 5xx may follow a write that was stored
// all the same): the retry continues it.
func (db *DB) AbandonKey(ctx context.Context, tenant, key string, lease time.Time) error {
	k := idemKey(tenant, key)
	return db.update(ctx, 256, func(txn *bdg.Txn) error {
		rec, err := heldKey(txn, k, lease)
		if err != nil {
			return err
		}
		rec.LeaseUntil = time.Time{}
		return putRecordUntil(txn, k, &rec, time.Now().Add(time.Until(rec.Expires)))
	})
}

// heldKey reads a key's record if it is still claimed under lease. A
// request that outlived its lease must not store its answer over, or drop,
// the claim of the request that took the key over (with another body,
// possibly).
func heldKey(txn *bdg.Txn, k []byte, lease time.Time) (idemRecord, error) {
	var rec idemRecord
	err := getRecord(txn, k, &rec)
	if errors.Is(err, storage.ErrNotFound) {
		return rec, storage.ErrLeaseLost
	}
	if err != nil {
		return rec, err
	}
	if rec.Done || !rec.LeaseUntil.Equal(lease) {
		return rec, storage.ErrLeaseLost
	}
	return rec, nil
}

// putRecordUntil writes a record that Badger keeps until at least until
// (forever if until is zero).
func putRecordUntil(txn *bdg.Txn, k []byte, v any, until time.Time) error {
	b, err := encode(v)
	if err != nil {
		return err
	}
	e := bdg.NewEntry(k, b)
	e.ExpiresAt = expiresAt(until)
	return txn.SetEntry(e)
}

// ttlMargin is how long Badger keeps a record with a TTL past its end.
const ttlMargin = time.Hour

// expiresAt is Badger's expiry for a record that must be readable until t
// (0, never, for a zero t). Whether a record still answers is decided on
// its own Expires, against the clock of the request that asks
// (checkDedupe, ClaimKey): Badger hides a record by the wall clock when
// the writer reads it, which may be well after the request was received
// (queued behind a batch and its sync), and a resend received inside its
// window then became a second event. So Badger keeps it ttlMargin longer.
// Badger counts whole Unix seconds and drops a record once its second has
// begun, so t is rounded up.
func expiresAt(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	t = t.Add(ttlMargin)
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return uint64(max(s, 1))
}
