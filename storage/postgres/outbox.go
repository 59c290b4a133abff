package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"hookgate/storage"
)

// claimSQL leases the oldest due deliveries of an endpoint. SKIP LOCKED
// lets gateways claim the same endpoint at once without waiting for each
// other or taking the same row; the lease (due = lease_until) makes a
// claim whose gateway died due again when it ends.
const claimSQL = `
WITH c AS (
	SELECT id, due FROM deliveries
	WHERE endpoint = $1 AND due IS NOT NULL AND due <= $2
	ORDER BY due, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
)
UPDATE deliveries d SET state = 'delivering', lease_until = $4, due = $4, updated_at = $2
FROM c, events e
WHERE d.id = c.id AND e.id = d.event
RETURNING c.due, ` + deliveryCols + `, ` + eventCols

// Claim leases up to limit due deliveries of one endpoint, oldest due
// first, within the endpoint's max_in_flight across every gateway.
func (db *DB) Claim(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration) ([]storage.Job, error) {
	jobs, _, err := db.claim(ctx, endpoint, now, limit, lease, nil)
	return jobs, err
}

// claim is Claim, and ClaimGated when policy is not nil: under the
// endpoint's transaction lock it reads the endpoint's limits and gates,
// decides how many it may take, takes them, and writes what the claim
// used of the gates, in one transaction.
func (db *DB) claim(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration, policy *storage.CircuitPolicy) ([]storage.Job, storage.GateWait, error) {
	if err := db.check(); err != nil {
		return nil, storage.GateWait{}, err
	}
	limit = min(limit, storage.MaxClaim)
	if limit <= 0 {
		return nil, storage.GateWait{}, nil
	}
	type claimed struct {
		due int64
		job storage.Job
	}
	var out []claimed
	var wait storage.GateWait
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		out, wait = out[:0], storage.GateWait{}
		g, err := readGates(ctx, tx, endpoint, now)
		if err != nil {
			return err
		}
		n, probe := limit, false
		if policy != nil {
			n, probe, wait = g.allow(now, limit)
		} else {
			n = g.inFlightRoom(limit)
		}
		if n == 0 {
			return nil
		}
		leaseEnd := nanos(now.Add(lease))
		rows, err := tx.Query(ctx, claimSQL, endpoint, nanos(now), n, leaseEnd)
		if err != nil {
			return err
		}
		for rows.Next() {
			var c claimed
			var d deliveryDest
			var e eventDest
			if err := rows.Scan(append(append([]any{&c.due}, d.targets()...), e.targets()...)...); err != nil {
				rows.Close()
				return err
			}
			c.job = storage.Job{Delivery: d.delivery(), Event: e.event()}
			out = append(out, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if policy == nil {
			return nil
		}
		probeID := ""
		if probe && len(out) > 0 {
			probeID = out[0].job.Delivery.ID
		}
		return g.write(ctx, tx, endpoint, now, len(out), probeID, leaseEnd, policy)
	})
	if err != nil {
		return nil, storage.GateWait{}, db.fail("claim", err)
	}
	slices.SortFunc(out, func(a, b claimed) int {
		if a.due != b.due {
			return cmpInt(a.due, b.due)
		}
		return strings.Compare(a.job.Delivery.ID, b.job.Delivery.ID)
	})
	jobs := make([]storage.Job, len(out))
	for i := range out {
		jobs[i] = out[i].job
	}
	return jobs, wait, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// NextDue returns the earliest due time (next attempt or lease expiry) of
// an endpoint's live deliveries.
func (db *DB) NextDue(ctx context.Context, endpoint string) (time.Time, bool, error) {
	if err := db.check(); err != nil {
		return time.Time{}, false, err
	}
	var due *int64
	err := db.pool.QueryRow(ctx, `SELECT min(due) FROM deliveries WHERE endpoint = $1 AND due IS NOT NULL`, endpoint).Scan(&due)
	if err != nil {
		return time.Time{}, false, db.fail("next due", err)
	}
	if due == nil {
		return time.Time{}, false, nil
	}
	return time.Unix(0, *due).UTC(), true, nil
}

// Depth counts an endpoint's live deliveries and the due ones, each up to
// limit.
func (db *DB) Depth(ctx context.Context, endpoint string, now time.Time, limit int) (live, due int, err error) {
	if err := db.check(); err != nil {
		return 0, 0, err
	}
	err = db.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM (SELECT 1 FROM deliveries WHERE endpoint = $1 AND due IS NOT NULL LIMIT $3) l),
		(SELECT count(*) FROM (SELECT 1 FROM deliveries WHERE endpoint = $1 AND due IS NOT NULL AND due <= $2 LIMIT $3) d)`,
		endpoint, nanos(now), max(limit, 0)).Scan(&live, &due)
	return live, due, db.fail("depth", err)
}

// Complete records an attempt and the delivery's next state in one
// statement, if the delivery is still held under the outcome's lease. The
// statement is committed with those of other attempts ending at the same
// time (outcomes.write): one transaction for many outcomes.
func (db *DB) Complete(ctx context.Context, out *storage.Outcome) error {
	if err := db.check(); err != nil {
		return err
	}
	sql, args, err := outcomeStatement(out)
	if err != nil {
		return err
	}
	return db.outcomes.write(ctx, db, &outcomeWrite{delivery: out.Delivery, sql: sql, args: args})
}

// outcomeStatement is the statement that records out: it returns how many
// deliveries it updated (0: the lease was lost).
func outcomeStatement(out *storage.Outcome) (string, []any, error) {
	att, err := encodeJSON(&out.Attempt)
	if err != nil {
		return "", nil, fmt.Errorf("postgres: encode attempt: %w", err)
	}
	count := 0
	if out.CountAttempt {
		count = 1
	}
	var due *int64
	if !out.State.Terminal() {
		n := nanos(out.NextAttemptAt)
		due = &n
	}
	args := []any{out.Delivery, nanos(out.Lease), count, string(out.State), nanosOrNull(out.NextAttemptAt),
		int64(out.Interval), []byte(out.Attempt.Error), out.Attempt.StatusCode, nanosOrNull(out.Attempt.At), due,
		out.Attempt.N, att}
	var sql strings.Builder
	sql.WriteString(`WITH d AS (
	UPDATE deliveries SET attempt_count = attempt_count + $3, state = $4, lease_until = NULL,
		next_attempt_at = $5, backoff = $6, last_error = $7, last_status = $8, updated_at = $9, due = $10
	WHERE id = $1 AND state = 'delivering' AND lease_until = $2
	RETURNING id, endpoint
), a AS (
	INSERT INTO attempts (delivery, n, doc) SELECT id, $11, $12 FROM d
	ON CONFLICT (delivery, n) DO UPDATE SET doc = excluded.doc
)`)
	switch {
	case out.EndHold:
		sql.WriteString(`, h AS (DELETE FROM endpoint_holds WHERE endpoint IN (SELECT endpoint FROM d))`)
	case !out.Hold.IsZero():
		// The later hold wins; a hold asked by another URL replaces it.
		sql.WriteString(`, h AS (
	INSERT INTO endpoint_holds AS o (endpoint, until, url) SELECT endpoint, $13, $14 FROM d
	ON CONFLICT (endpoint) DO UPDATE SET until = excluded.until, url = excluded.url
	WHERE o.url <> excluded.url OR excluded.until > o.until
)`)
		args = append(args, nanos(out.Hold), out.HoldURL)
	}
	if out.Circuit {
		ok, end := len(args)+1, len(args)+2
		sql.WriteString(strings.NewReplacer("$ok", fmt.Sprintf("$%d::bool", ok), "$end", fmt.Sprintf("$%d::bigint", end)).Replace(circuitSQL))
		args = append(args, out.State == storage.StateSucceeded, nanos(out.Attempt.At.Add(out.Attempt.Latency)))
		if out.CircuitOpened != nil {
			args = appendNotice(&sql, args, "co", out.CircuitOpened, `EXISTS (SELECT 1 FROM g WHERE g.change = `+circuitOpenedChange+`)`)
		}
		if out.CircuitClosed != nil {
			args = appendNotice(&sql, args, "cc", out.CircuitClosed, `EXISTS (SELECT 1 FROM g WHERE g.change = `+circuitClosedChange+`)`)
		}
	}
	for i := range out.Notices {
		args = appendNotice(&sql, args, fmt.Sprintf("n%d", i), &out.Notices[i], `EXISTS (SELECT 1 FROM d)`)
	}
	sql.WriteString(` SELECT count(*) FROM d`)
	return sql.String(), args, nil
}

// EndpointHold reads an endpoint's stored pause, if it lasts past now.
func (db *DB) EndpointHold(ctx context.Context, endpoint string, now time.Time) (time.Time, string, error) {
	if err := db.check(); err != nil {
		return time.Time{}, "", err
	}
	var until int64
	var url string
	err := db.pool.QueryRow(ctx, `SELECT until, url FROM endpoint_holds WHERE endpoint = $1 AND until > $2`,
		endpoint, nanos(now)).Scan(&until, &url)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, "", nil
	}
	if err != nil {
		return time.Time{}, "", db.fail("read an endpoint hold", err)
	}
	return time.Unix(0, until).UTC(), url, nil
}

// Release returns deliveries claimed under lease to pending, due at due
// (a zero due: their due time from before the claim).
func (db *DB) Release(ctx context.Context, ids []string, lease, due time.Time) error {
	if err := db.check(); err != nil {
		return err
	}
	// A released probe is no probe: the half-open circuit lets another go.
	_, err := db.pool.Exec(ctx, `WITH r AS (
		UPDATE deliveries
		SET state = 'pending', lease_until = NULL,
			next_attempt_at = coalesce($3, next_attempt_at), due = coalesce($3, next_attempt_at)
		WHERE id = ANY($1) AND state = 'delivering' AND lease_until = $2
		RETURNING id
	) UPDATE endpoint_gates SET probe = NULL, probe_until = NULL WHERE probe IN (SELECT id FROM r)`,
		ids, nanos(lease), nanosOrNull(due))
	return db.fail("release", err)
}

// Enqueue adds deliveries of stored events.
func (db *DB) Enqueue(ctx context.Context, ds []storage.Delivery) error {
	if err := db.check(); err != nil {
		return err
	}
	return db.fail("enqueue", db.inTx(ctx, func(tx pgx.Tx) error { return insertDeliveries(ctx, tx, ds) }))
}

// insertDeliveries writes new deliveries; ErrNotFound when one's event is
// not stored. The foreign key's check takes a share lock on the event
// row, so an insert and a purge of its event are ordered: the purge
// waits, or the insert finds the event gone.
func insertDeliveries(ctx context.Context, tx pgx.Tx, ds []storage.Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO deliveries (`+deliveryInsertCols+`) SELECT * FROM `+deliveryUnnest(1), deliveryArrays(ds)...)
	if pgCode(err) == codeForeignKeyViolation {
		return fmt.Errorf("an event of the deliveries: %w", storage.ErrNotFound)
	}
	return err
}

// Retry makes a delivery due at now with a fresh retry budget.
func (db *DB) Retry(ctx context.Context, id string, now time.Time) (storage.Delivery, error) {
	if err := db.check(); err != nil {
		return storage.Delivery{}, err
	}
	t := nanos(now)
	rows, err := db.pool.Query(ctx, `UPDATE deliveries d
		SET state = 'pending', lease_until = NULL, next_attempt_at = $2, due = $2, retry_from = $2,
			retry_base = attempt_count, backoff = 0, updated_at = $2
		WHERE id = $1 AND state <> 'cancelled' AND NOT (state = 'delivering' AND lease_until > $2)
		RETURNING `+deliveryCols, id, t)
	if err != nil {
		return storage.Delivery{}, db.fail("retry", err)
	}
	ds, err := scanDeliveries(rows)
	if err != nil {
		return storage.Delivery{}, db.fail("retry", err)
	}
	if len(ds) == 1 {
		return ds[0], nil
	}
	d, err := db.GetDelivery(ctx, id)
	switch {
	case err != nil:
		return storage.Delivery{}, err
	case d.State == storage.StateCancelled:
		return storage.Delivery{}, fmt.Errorf("delivery %s is cancelled: %w", id, storage.ErrConflict)
	}
	// Its attempt would lose its lease and go unrecorded, and the
	// receiver would get two requests with the same attempt number.
	return storage.Delivery{}, fmt.Errorf("delivery %s is being delivered: %w", id, storage.ErrConflict)
}

// cancelBatch bounds the deliveries one statement of CancelEndpoint
// changes, so that a large backlog never makes one huge transaction.
const cancelBatch = 1000

// CancelEndpoint cancels every live delivery of an endpoint.
func (db *DB) CancelEndpoint(ctx context.Context, endpoint string) (int, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	total := 0
	for {
		tag, err := db.pool.Exec(ctx, `UPDATE deliveries SET state = 'cancelled', lease_until = NULL, due = NULL, updated_at = $3
			WHERE id IN (SELECT id FROM deliveries WHERE endpoint = $1 AND due IS NOT NULL LIMIT $2)`,
			endpoint, cancelBatch, time.Now().UnixNano())
		if err != nil {
			return total, db.fail("cancel an endpoint's deliveries", err)
		}
		total += int(tag.RowsAffected())
		if tag.RowsAffected() == 0 {
			return total, nil
		}
	}
}

// QueuedEndpoints lists the endpoints with live deliveries, each once,
// with a loose index scan (one probe per endpoint, not one per row).
func (db *DB) QueuedEndpoints(ctx context.Context) ([]string, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, `WITH RECURSIVE q AS (
		(SELECT endpoint FROM deliveries WHERE due IS NOT NULL ORDER BY endpoint LIMIT 1)
		UNION ALL
		SELECT (SELECT endpoint FROM deliveries WHERE due IS NOT NULL AND endpoint > q.endpoint ORDER BY endpoint LIMIT 1)
		FROM q WHERE q.endpoint IS NOT NULL
	) SELECT endpoint FROM q WHERE endpoint IS NOT NULL`)
	if err != nil {
		return nil, db.fail("list queued endpoints", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, db.fail("list queued endpoints", err)
}
