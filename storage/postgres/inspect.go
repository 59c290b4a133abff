package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"hookgate/storage"
)

// listScanBudget bounds the rows one page of ListEvents looks at when its
// type filter is a glob (matched here, not in SQL): past it the page ends
// short, even empty, with a cursor after the last row looked at.
const listScanBudget = 10_000

// scanChunk is how many candidate rows one query of a glob listing reads.
const scanChunk = 500

// GetEvent reads one event.
func (db *DB) GetEvent(ctx context.Context, id string) (storage.Event, error) {
	if err := db.check(); err != nil {
		return storage.Event{}, err
	}
	evs, err := db.eventsByID(ctx, []string{id})
	if err != nil {
		return storage.Event{}, err
	}
	if len(evs) == 0 {
		return storage.Event{}, storage.ErrNotFound
	}
	return evs[0], nil
}

// eventsByID reads events, newest first.
func (db *DB) eventsByID(ctx context.Context, ids []string) ([]storage.Event, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+eventCols+` FROM events e WHERE e.id = ANY($1) ORDER BY e.id DESC`, ids)
	if err != nil {
		return nil, db.fail("read events", err)
	}
	defer rows.Close()
	var out []storage.Event
	for rows.Next() {
		var x eventDest
		if err := rows.Scan(x.targets()...); err != nil {
			return nil, db.fail("read events", err)
		}
		out = append(out, x.event())
	}
	return out, db.fail("read events", rows.Err())
}

// GetDelivery reads one delivery.
func (db *DB) GetDelivery(ctx context.Context, id string) (storage.Delivery, error) {
	if err := db.check(); err != nil {
		return storage.Delivery{}, err
	}
	rows, err := db.pool.Query(ctx, `SELECT `+deliveryCols+` FROM deliveries d WHERE d.id = $1`, id)
	if err != nil {
		return storage.Delivery{}, db.fail("read a delivery", err)
	}
	ds, err := scanDeliveries(rows)
	if err != nil {
		return storage.Delivery{}, db.fail("read a delivery", err)
	}
	if len(ds) == 0 {
		return storage.Delivery{}, storage.ErrNotFound
	}
	return ds[0], nil
}

// ListAttempts returns a delivery's attempts, first to last.
func (db *DB) ListAttempts(ctx context.Context, delivery string) ([]storage.Attempt, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, `SELECT doc FROM attempts WHERE delivery = $1 ORDER BY n`, delivery)
	if err != nil {
		return nil, db.fail("list attempts", err)
	}
	docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, db.fail("list attempts", err)
	}
	var out []storage.Attempt
	for _, d := range docs {
		var a storage.Attempt
		if err := json.Unmarshal(d, &a); err != nil {
			return nil, fmt.Errorf("postgres: decode an attempt of %s: %w", delivery, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// where builds a WHERE clause of conditions with numbered parameters.
type where struct {
	conds []string
	args  []any
}

// add appends a condition; "?" in it stands for the next parameter.
func (w *where) add(cond string, arg any) {
	w.args = append(w.args, arg)
	w.conds = append(w.conds, strings.Replace(cond, "?", fmt.Sprintf("$%d", len(w.args)), 1))
}

func (w *where) sql() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// next is the placeholder of the parameter after the conditions'.
func (w *where) next(arg any) string {
	w.args = append(w.args, arg)
	return fmt.Sprintf("$%d", len(w.args))
}

// ListEvents returns a page of events, newest first. The page is chosen
// from the events' ids, types and sizes; only its events' bodies are read.
func (db *DB) ListEvents(ctx context.Context, f storage.EventFilter) ([]storage.Event, string, error) {
	if err := db.check(); err != nil {
		return nil, "", err
	}
	limit := storage.PageLimit(f.Limit)
	after, err := storage.DecodeCursor(f.Cursor, "evt_")
	if err != nil {
		return nil, "", err
	}
	glob := f.Type != "" && storage.IsTypeGlob(f.Type)
	var ids []string
	more, stoppedAt, weight, examined := false, "", int64(0), 0
	for !more && stoppedAt == "" {
		var w where
		if f.Tenant != "" {
			w.add("tenant = ?", f.Tenant)
		}
		if f.Source != "" {
			w.add("source = ?", f.Source)
		}
		if f.Type != "" && !glob {
			w.add("type = ?", []byte(f.Type))
		}
		if f.EventID != "" {
			w.add("event_id = ?", []byte(f.EventID))
		}
		if !f.Since.IsZero() {
			w.add("received_at >= ?", nanos(f.Since))
		}
		if !f.Until.IsZero() {
			w.add("received_at <= ?", nanos(f.Until))
		}
		if after != "" {
			w.add("id < ?", after)
		}
		n := limit + 1
		if glob {
			n = scanChunk
		}
		rows, err := db.pool.Query(ctx, `SELECT id, type, weight FROM events`+w.sql()+` ORDER BY id DESC LIMIT `+w.next(n), w.args...)
		if err != nil {
			return nil, "", db.fail("list events", err)
		}
		got := 0
		for rows.Next() {
			var id string
			var typ []byte
			var wt int64
			if err := rows.Scan(&id, &typ, &wt); err != nil {
				rows.Close()
				return nil, "", db.fail("list events", err)
			}
			got++
			after = id
			if more || stoppedAt != "" {
				continue // the rest of this chunk is not looked at
			}
			if !glob || storage.MatchType(f.Type, string(typ)) {
				if len(ids) == limit || len(ids) > 0 && weight+wt > storage.PageBytes {
					more = true
					continue
				}
				ids, weight = append(ids, id), weight+wt
			}
			if examined++; glob && examined >= listScanBudget {
				stoppedAt = id
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, "", db.fail("list events", err)
		}
		if got < n {
			break // no more rows
		}
	}
	evs, err := db.eventsByID(ctx, ids)
	if err != nil {
		return nil, "", err
	}
	next := ""
	switch {
	case stoppedAt != "":
		next = storage.EncodeCursor(stoppedAt)
	case more && len(ids) > 0:
		next = storage.EncodeCursor(ids[len(ids)-1])
	}
	return evs, next, nil
}

// ListDeliveries returns a page of deliveries, newest first. Every filter
// is SQL's, so pages are full.
func (db *DB) ListDeliveries(ctx context.Context, f storage.DeliveryFilter) ([]storage.Delivery, string, error) {
	if err := db.check(); err != nil {
		return nil, "", err
	}
	limit := storage.PageLimit(f.Limit)
	after, err := storage.DecodeCursor(f.Cursor, "dlv_")
	if err != nil {
		return nil, "", err
	}
	var w where
	if f.Tenant != "" {
		w.add("d.tenant = ?", f.Tenant)
	}
	if f.Endpoint != "" {
		w.add("d.endpoint = ?", f.Endpoint)
	}
	if f.State != "" {
		w.add("d.state = ?", string(f.State))
	}
	if f.Event != "" {
		w.add("d.event = ?", f.Event)
	}
	if !f.Since.IsZero() {
		w.add("d.created_at >= ?", nanos(f.Since))
	}
	if !f.Until.IsZero() {
		w.add("d.created_at <= ?", nanos(f.Until))
	}
	if after != "" {
		w.add("d.id < ?", after)
	}
	rows, err := db.pool.Query(ctx, `SELECT `+deliveryCols+` FROM deliveries d`+w.sql()+` ORDER BY d.id DESC LIMIT `+w.next(limit+1), w.args...)
	if err != nil {
		return nil, "", db.fail("list deliveries", err)
	}
	ds, err := scanDeliveries(rows)
	if err != nil {
		return nil, "", db.fail("list deliveries", err)
	}
	next := ""
	if len(ds) > limit {
		ds = ds[:limit]
		next = storage.EncodeCursor(ds[limit-1].ID)
	}
	return ds, next, nil
}
