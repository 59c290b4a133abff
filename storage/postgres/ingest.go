package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"hookgate/storage"
)

// acceptSQL claims the dedupe key and writes the event and its
// deliveries in one statement, so one round trip and one commit. The
// claim is the primary key: a concurrent insert of the same key waits
// for the other transaction, and then finds its row. A record whose
// window ended before this request was received is taken over (the key
// acts as new). Nothing but the claim is written unless the claim is
// this statement's.
var acceptSQL = `
WITH claim AS (
	INSERT INTO dedupe AS d (tenant, source, event_id, body_hash, status, response, expires, event)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
	ON CONFLICT (tenant, source, event_id) DO UPDATE
		SET body_hash = excluded.body_hash, status = excluded.status, response = excluded.response,
			expires = excluded.expires, event = excluded.event
		WHERE d.expires <= $9
	RETURNING 1
), ev AS (
	INSERT INTO events (id, tenant, source, event_id, type, received_at, content_type,
		header_names, header_values, body, idempotency_key, weight)
	SELECT $8, $10, $11, $12, $13, $9, $14, $15, $16, $17, $18, $19
	WHERE EXISTS (SELECT 1 FROM claim)
	RETURNING id
), dl AS (
	INSERT INTO deliveries (` + deliveryInsertCols + `)
	SELECT u.* FROM ` + deliveryUnnest(20) + ` AS u
	WHERE EXISTS (SELECT 1 FROM ev)
)
SELECT EXISTS (SELECT 1 FROM claim)`

// Ingest stores an event and its deliveries, or answers from the stored
// dedupe record.
func (db *DB) Ingest(ctx context.Context, req *storage.IngestRequest) (storage.IngestResult, error) {
	if err := db.check(); err != nil {
		return storage.IngestResult{}, err
	}
	ev := &req.Event
	expires := int64(math.MaxInt64) // no window: remembered for ever
	if !req.DedupeUntil.IsZero() {
		expires = nanos(req.DedupeUntil)
	}
	received := nanos(ev.ReceivedAt)
	names, values := headerArrays(ev.Headers)
	args := []any{
		[]byte(req.Key.Tenant), []byte(req.Key.Source), []byte(req.Key.EventID), req.BodyHash[:],
		req.Response.Status, orEmpty(req.Response.Body), expires, ev.ID, received,
		ev.Tenant, ev.Source, []byte(ev.EventID), []byte(ev.Type), []byte(ev.ContentType),
		names, values, orEmpty(ev.Body), ev.IdempotencyKey, eventWeight(ev),
	}
	args = append(args, deliveryArrays(req.Deliveries)...)
	// A stored record may go (retention) or be taken over (its window
	// ended) between the claim and the read of the record: then claim
	// again. Each turn needs another writer to have won a race.
	for range 8 {
		var claimed bool
		if err := db.pool.QueryRow(ctx, acceptSQL, args...).Scan(&claimed); err != nil {
			return storage.IngestResult{}, db.fail("accept", err)
		}
		if claimed {
			return storage.IngestResult{Response: req.Response}, nil
		}
		res, found, err := db.storedAnswer(ctx, req, received)
		if err != nil || found {
			return res, err
		}
	}
	return storage.IngestResult{}, fmt.Errorf("postgres: accept: the dedupe record of %q keeps changing", req.Key.EventID)
}

// storedAnswer reads the committed dedupe record of a claim that lost:
// its answer for the same body, ErrIdempotencyMismatch for another.
func (db *DB) storedAnswer(ctx context.Context, req *storage.IngestRequest, received int64) (storage.IngestResult, bool, error) {
	var hash, body []byte
	var status int
	var expires int64
	err := db.pool.QueryRow(ctx, `SELECT body_hash, status, response, expires FROM dedupe
		WHERE tenant = $1 AND source = $2 AND event_id = $3`,
		[]byte(req.Key.Tenant), []byte(req.Key.Source), []byte(req.Key.EventID)).Scan(&hash, &status, &body, &expires)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return storage.IngestResult{}, false, nil
	case err != nil:
		return storage.IngestResult{}, false, db.fail("read a dedupe record", err)
	case expires <= received:
		return storage.IngestResult{}, false, nil
	case string(hash) != string(req.BodyHash[:]):
		return storage.IngestResult{}, true, storage.ErrIdempotencyMismatch
	}
	return storage.IngestResult{Replayed: true, Response: storage.Response{Status: status, Body: orNil(body)}}, true, nil
}

// eventWeight is what an event counts against storage.PageBytes.
func eventWeight(ev *storage.Event) int64 {
	n := len(ev.Body)
	for k, v := range ev.Headers {
		n += len(k) + len(v)
	}
	return int64(n)
}

// headerArrays splits headers into two parallel bytea arrays (never
// NULL): header values are the provider's bytes, which text refuses when
// they are not UTF-8.
func headerArrays(h map[string]string) (names, values [][]byte) {
	names, values = make([][]byte, 0, len(h)), make([][]byte, 0, len(h))
	for k, v := range h {
		names, values = append(names, []byte(k)), append(values, []byte(v))
	}
	return names, values
}
