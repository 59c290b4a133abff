package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"hookgate/storage"
)

// ClaimKey atomically claims (tenant, key) for one request: a new key is
// inserted (ON CONFLICT DO NOTHING); a known one is read under a row lock
// and decided as the embedded engine decides it, so that two gateways
// claiming one key at once take turns on its row.
func (db *DB) ClaimKey(ctx context.Context, c storage.IdemClaim) (storage.IdemResult, error) {
	if err := db.check(); err != nil {
		return storage.IdemResult{}, err
	}
	keep := c.LeaseUntil
	if c.Remember.After(keep) {
		keep = c.Remember
	}
	tenant, key := []byte(c.Tenant), []byte(c.Key)
	var res storage.IdemResult
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO idem_keys (tenant, key, hash, done, lease, status, response, expires, since)
			VALUES ($1, $2, $3, false, $4, 0, '', $5, $6) ON CONFLICT (tenant, key) DO NOTHING`,
			tenant, key, c.RequestHash[:], nanosOrNull(c.LeaseUntil), nanosOrNull(keep), nanosOrNull(c.Now))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			res = storage.IdemResult{State: storage.IdemNew, LeaseUntil: c.LeaseUntil, Since: c.Now}
			return nil
		}
		var rec idemRow
		err = tx.QueryRow(ctx, `SELECT hash, done, lease, status, response, expires, since FROM idem_keys
			WHERE tenant = $1 AND key = $2 FOR UPDATE`, tenant, key).
			Scan(&rec.hash, &rec.done, &rec.lease, &rec.status, &rec.response, &rec.expires, &rec.since)
		if err != nil {
			return err // the row was there a moment ago: nothing deletes an unexpired one
		}
		var take bool
		res, take = decideClaim(&rec, c)
		if !take {
			return nil
		}
		_, err = tx.Exec(ctx, `UPDATE idem_keys SET hash = $3, done = false, lease = $4, status = 0, response = '',
			expires = $5, since = $6 WHERE tenant = $1 AND key = $2`,
			tenant, key, c.RequestHash[:], nanosOrNull(c.LeaseUntil), nanosOrNull(keep), nanosOrNull(res.Since))
		return err
	})
	return res, db.fail("claim an idempotency key", err)
}

// idemRow is a stored admin Idempotency-Key.
type idemRow struct {
	hash                  []byte
	done                  bool
	lease, expires, since *int64
	status                int
	response              []byte
}

// decideClaim is ClaimKey's decision on a stored key: take reports that
// the claim takes the key (res is then IdemNew).
func decideClaim(rec *idemRow, c storage.IdemClaim) (res storage.IdemResult, take bool) {
	lease, expires := fromNanos(rec.lease), fromNanos(rec.expires)
	// While a record is remembered (its lease or its expiry), the key is
	// its request's. A claim left behind by a dead run, or given up after
	// a 5xx, may have had its effect, so another request under it is a
	// reuse there too.
	remembered := c.Now.Before(expires) || !rec.done && c.Now.Before(lease)
	switch {
	case remembered && string(rec.hash) != string(c.RequestHash[:]):
		return storage.IdemResult{State: storage.IdemMismatch}, false
	case rec.done && remembered:
		return storage.IdemResult{State: storage.IdemReplay, Response: storage.Response{Status: rec.status, Body: orNil(rec.response)}}, false
	case !rec.done && c.Now.Before(lease):
		return storage.IdemResult{State: storage.IdemInProgress, LeaseUntil: lease}, false
	}
	// Expired, or a claim of this same request left behind by a dead run
	// (or given up after a 5xx): take it, continuing that use of the key.
	since := c.Now
	if s := fromNanos(rec.since); remembered && !rec.done && !s.IsZero() {
		since = s
	}
	return storage.IdemResult{State: storage.IdemNew, LeaseUntil: c.LeaseUntil, Since: since}, true
}

// FinishKey stores the answer of a key still claimed under lease.
func (db *DB) FinishKey(ctx context.Context, tenant, key string, lease time.Time, resp storage.Response, expires time.Time) error {
	if err := db.check(); err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `UPDATE idem_keys SET done = true, lease = NULL, status = $4, response = $5, expires = $6
		WHERE tenant = $1 AND key = $2 AND NOT done AND lease = $3`,
		[]byte(tenant), []byte(key), nanos(lease), resp.Status, orEmpty(resp.Body), nanosOrNull(expires))
	if err != nil {
		return db.fail("finish an idempotency key", err)
	}
	if tag.RowsAffected() == 0 {
		return storage.ErrLeaseLost
	}
	return nil
}

// AbandonKey ends a claim still held under lease, so that a retry of the
// same request executes it again; its use of the key stays remembered.
func (db *DB) AbandonKey(ctx context.Context, tenant, key string, lease time.Time) error {
	if err := db.check(); err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `UPDATE idem_keys SET lease = NULL
		WHERE tenant = $1 AND key = $2 AND NOT done AND lease = $3`, []byte(tenant), []byte(key), nanos(lease))
	if err != nil {
		return db.fail("abandon an idempotency key", err)
	}
	if tag.RowsAffected() == 0 {
		return storage.ErrLeaseLost
	}
	return nil
}
