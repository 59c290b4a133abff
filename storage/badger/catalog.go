package badger

import (
	"context"
	"errors"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// PutEndpoint creates or replaces an endpoint.
func (db *DB) PutEndpoint(ctx context.Context, ep *storage.Endpoint) error {
	v := *ep
	return db.updateControl(ctx, 1024, func(txn *bdg.Txn) error {
		return putRecord(txn, endpointKey(v.ID), &v)
	})
}

// UpdateEndpoint is ChangeEndpoint without a notice.
func (db *DB) UpdateEndpoint(ctx context.Context, id string, fn func(*storage.Endpoint) error) (storage.Endpoint, error) {
	return db.ChangeEndpoint(ctx, id, func(ep *storage.Endpoint) (*storage.Notice, error) { return nil, fn(ep) })
}

// ChangeEndpoint reads, changes and writes an endpoint, with the notice
// fn returns, in one operation of the single writer, so no other write of
// it can come in between.
func (db *DB) ChangeEndpoint(ctx context.Context, id string, fn func(*storage.Endpoint) (*storage.Notice, error)) (storage.Endpoint, error) {
	var out storage.Endpoint
	// A notice is a few hundred bytes of JSON and a delivery per subscriber.
	err := db.updateControl(ctx, 16<<10, func(txn *bdg.Txn) error {
		var ep storage.Endpoint
		if err := getRecord(txn, endpointKey(id), &ep); err != nil {
			return err
		}
		n, err := fn(&ep)
		if err != nil {
			return err
		}
		if err := putRecord(txn, endpointKey(id), &ep); err != nil {
			return err
		}
		notices, _, err := encodeNotices(n)
		if err != nil {
			return err
		}
		if err := db.putNotices(txn, notices); err != nil {
			return err
		}
		out = ep
		return nil
	})
	return out, err
}

// GetEndpoint reads one endpoint.
func (db *DB) GetEndpoint(ctx context.Context, id string) (storage.Endpoint, error) {
	var ep storage.Endpoint
	err := db.view(func(txn *bdg.Txn) error { return getRecord(txn, endpointKey(id), &ep) })
	return ep, err
}

// ListEndpoints returns every endpoint, ordered by ID.
func (db *DB) ListEndpoints(ctx context.Context) ([]storage.Endpoint, error) {
	var out []storage.Endpoint
	err := db.view(func(txn *bdg.Txn) error {
		return scanRecords(txn, prefixEndpoint, func() any {
			out = append(out, storage.Endpoint{})
			return &out[len(out)-1]
		})
	})
	return out, err
}

// DeleteEndpoint removes an endpoint. Its live deliveries are cancelled by
// the caller with CancelEndpoint.
func (db *DB) DeleteEndpoint(ctx context.Context, id string) error {
	return db.updateControl(ctx, 64, func(txn *bdg.Txn) error {
		return deleteExisting(txn, endpointKey(id))
	})
}

// PutSource creates or replaces a source.
func (db *DB) PutSource(ctx context.Context, src *storage.Source) error {
	v := *src
	return db.updateControl(ctx, 1024, func(txn *bdg.Txn) error {
		return putRecord(txn, sourceKey(v.ID), &v)
	})
}

// GetSource reads one source.
func (db *DB) GetSource(ctx context.Context, id string) (storage.Source, error) {
	var src storage.Source
	err := db.view(func(txn *bdg.Txn) error { return getRecord(txn, sourceKey(id), &src) })
	return src, err
}

// ListSources returns every source, ordered by ID.
func (db *DB) ListSources(ctx context.Context) ([]storage.Source, error) {
	var out []storage.Source
	err := db.view(func(txn *bdg.Txn) error {
		return scanRecords(txn, prefixSource, func() any {
			out = append(out, storage.Source{})
			return &out[len(out)-1]
		})
	})
	return out, err
}

// DeleteSource removes a source.
func (db *DB) DeleteSource(ctx context.Context, id string) error {
	return db.updateControl(ctx, 64, func(txn *bdg.Txn) error {
		return deleteExisting(txn, sourceKey(id))
	})
}

func deleteExisting(txn *bdg.Txn, k []byte) error {
	if _, err := txn.Get(k); err != nil {
		if errors.Is(err, bdg.ErrKeyNotFound) {
			return storage.ErrNotFound
		}
		return err
	}
	return txn.Delete(k)
}

// scanRecords decodes every record under prefix p into the value next returns.
func scanRecords(txn *bdg.Txn, p []byte, next func() any) error {
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: p, PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		if err := it.Item().Value(func(b []byte) error { return decode(b, next()) }); err != nil {
			return err
		}
	}
	return nil
}
