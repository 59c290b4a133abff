package postgres

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"hookgate/storage"
)

// Endpoints and sources are few and read whole: each is one JSON
// document, keyed by its id.

func encodeJSON(v any) ([]byte, error) { return json.Marshal(v) }

// PutEndpoint creates or replaces an endpoint.
func (db *DB) PutEndpoint(ctx context.Context, ep *storage.Endpoint) error {
	return db.putDoc(ctx, "endpoints", ep.ID, ep)
}

// UpdateEndpoint is ChangeEndpoint without a notice.
func (db *DB) UpdateEndpoint(ctx context.Context, id string, fn func(*storage.Endpoint) error) (storage.Endpoint, error) {
	return db.ChangeEndpoint(ctx, id, func(ep *storage.Endpoint) (*storage.Notice, error) { return nil, fn(ep) })
}

// ChangeEndpoint reads an endpoint under a row lock, applies fn and
// writes the result, and the notice fn returns, in the same transaction:
// no other write of it comes in between, from this gateway or another.
func (db *DB) ChangeEndpoint(ctx context.Context, id string, fn func(*storage.Endpoint) (*storage.Notice, error)) (storage.Endpoint, error) {
	if err := db.check(); err != nil {
		return storage.Endpoint{}, err
	}
	var out storage.Endpoint
	var fnErr error
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		var doc []byte
		err := tx.QueryRow(ctx, `SELECT doc FROM endpoints WHERE id = $1 FOR UPDATE`, id).Scan(&doc)
		if errors.Is(err, pgx.ErrNoRows) {
			fnErr = storage.ErrNotFound
			return fnErr
		}
		if err != nil {
			return err
		}
		var ep storage.Endpoint
		if err := json.Unmarshal(doc, &ep); err != nil {
			return err
		}
		n, err := fn(&ep)
		if err != nil {
			fnErr = err
			return err
		}
		b, err := encodeJSON(&ep)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE endpoints SET doc = $2 WHERE id = $1`, id, b); err != nil {
			return err
		}
		if err := insertNotice(ctx, tx, n); err != nil {
			return err
		}
		out = ep
		return nil
	})
	if fnErr != nil && errors.Is(err, fnErr) {
		return storage.Endpoint{}, fnErr
	}
	return out, db.fail("update endpoint", err)
}

// GetEndpoint reads one endpoint.
func (db *DB) GetEndpoint(ctx context.Context, id string) (storage.Endpoint, error) {
	var ep storage.Endpoint
	err := db.getDoc(ctx, "endpoints", id, &ep)
	return ep, err
}

// ListEndpoints returns every endpoint, ordered by id.
func (db *DB) ListEndpoints(ctx context.Context) ([]storage.Endpoint, error) {
	return listDocs[storage.Endpoint](ctx, db, "endpoints")
}

// DeleteEndpoint removes an endpoint; ErrNotFound when there is none.
func (db *DB) DeleteEndpoint(ctx context.Context, id string) error {
	return db.deleteDoc(ctx, "endpoints", id)
}

// PutSource creates or replaces a source.
func (db *DB) PutSource(ctx context.Context, src *storage.Source) error {
	return db.putDoc(ctx, "sources", src.ID, src)
}

// GetSource reads one source.
func (db *DB) GetSource(ctx context.Context, id string) (storage.Source, error) {
	var src storage.Source
	err := db.getDoc(ctx, "sources", id, &src)
	return src, err
}

// ListSources returns every source, ordered by id.
func (db *DB) ListSources(ctx context.Context) ([]storage.Source, error) {
	return listDocs[storage.Source](ctx, db, "sources")
}

// DeleteSource removes a source; ErrNotFound when there is none.
func (db *DB) DeleteSource(ctx context.Context, id string) error {
	return db.deleteDoc(ctx, "sources", id)
}

// The table names below are the engine's constants, never input.

func (db *DB) putDoc(ctx context.Context, table, id string, v any) error {
	if err := db.check(); err != nil {
		return err
	}
	b, err := encodeJSON(v)
	if err != nil {
		return err
	}
	_, err = db.pool.Exec(ctx, `INSERT INTO `+table+` (id, doc) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET doc = excluded.doc`, id, b)
	return db.fail("write "+table, err)
}

func (db *DB) getDoc(ctx context.Context, table, id string, v any) error {
	if err := db.check(); err != nil {
		return err
	}
	var doc []byte
	err := db.pool.QueryRow(ctx, `SELECT doc FROM `+table+` WHERE id = $1`, id).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.ErrNotFound
	}
	if err != nil {
		return db.fail("read "+table, err)
	}
	return json.Unmarshal(doc, v)
}

func listDocs[T any](ctx context.Context, db *DB, table string) ([]T, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, `SELECT doc FROM `+table+` ORDER BY id`)
	if err != nil {
		return nil, db.fail("list "+table, err)
	}
	docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, db.fail("list "+table, err)
	}
	var out []T
	for _, d := range docs {
		var v T
		if err := json.Unmarshal(d, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (db *DB) deleteDoc(ctx context.Context, table, id string) error {
	if err := db.check(); err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `DELETE FROM `+table+` WHERE id = $1`, id)
	if err != nil {
		return db.fail("delete from "+table, err)
	}
	if tag.RowsAffected() == 0 {
		return storage.ErrNotFound
	}
	return nil
}
