package badger

import (
	"bytes"
	"context"
	"errors"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// The tenant index of deliveries (dt:) lets a tenant's listing look at
// that tenant's deliveries only. Without it a scoped listing scans every
// tenant's: unbounded, or, with a scan budget, telling the tenant by where
// its pages end that other tenants have records in a time window.
//
// Stores written by older builds have deliveries without the index. Open
// builds it in the background, a chunk per transaction, and marks the
// store when it is done; until then a scoped listing scans every tenant's
// deliveries without a budget, as before.

// keyTenantIndexBuilt marks a store whose every delivery has its dt: key.
var keyTenantIndexBuilt = []byte("zz:index-dt")

// tenantIndexChunk is how many deliveries one transaction of the build
// indexes.
var tenantIndexChunk = 1000

// startTenantIndex marks the index ready, or starts building it. A store
// without deliveries (a new one) is marked at once.
func (db *DB) startTenantIndex(ctx context.Context) error {
	built, empty := false, false
	check := func(txn *bdg.Txn) error {
		_, err := txn.Get(keyTenantIndexBuilt)
		built = err == nil
		if err != nil && !errors.Is(err, bdg.ErrKeyNotFound) {
			return err
		}
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefixDelivery})
		defer it.Close()
		it.Rewind()
		empty = !it.Valid()
		return nil
	}
	if err := db.view(check); err != nil {
		return err
	}
	if !built && empty {
		err := db.updateControl(ctx, 64, func(txn *bdg.Txn) error {
			if err := check(txn); err != nil || built || !empty {
				return err
			}
			built = true
			return txn.Set(keyTenantIndexBuilt, []byte("1"))
		})
		if err != nil {
			return err
		}
	}
	if built {
		db.tenantIndexReady.Store(true)
		return nil
	}
	db.bg.Go(db.buildTenantIndex)
	return nil
}

// buildTenantIndex writes the dt: key of every delivery, a chunk at a time,
// then the mark. A store closed halfway builds again at the next open (the
// writes are idempotent). Deliveries written meanwhile get their key from
// putNewDelivery; the build runs in the writer, so it never indexes a
// delivery that a purge has deleted.
func (db *DB) buildTenantIndex() {
	var after []byte
	total := 0
	for {
		select {
		case <-db.stop:
			return
		default:
		}
		var next []byte
		done, n := false, 0
		err := db.update(context.Background(), 64*tenantIndexChunk, func(txn *bdg.Txn) error {
			next, done, n = nil, false, 0
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefixDelivery})
			defer it.Close()
			for it.Seek(orKey(after, prefixDelivery)); it.Valid(); it.Next() {
				k := it.Item().Key()
				if after != nil && bytes.Equal(k, after) {
					continue
				}
				if n == tenantIndexChunk {
					return nil
				}
				var d storage.Delivery
				err := it.Item().Value(func(b []byte) error { return decode(b, &d) })
				if errors.Is(err, errCodec) {
					// Unreadable: listings skip it anyway, and it must
					// not stop the index of every other delivery.
					db.log.Error("the tenant index skipped an unreadable delivery record", "key", string(k), "err", err)
					n++
					next = it.Item().KeyCopy(next[:0])
					continue
				}
				if err != nil {
					return err
				}
				if err := txn.Set(tenantDeliveryKey(d.Tenant, string(k[len(prefixDelivery):])), nil); err != nil {
					return err
				}
				n++
				next = it.Item().KeyCopy(next[:0])
			}
			done = true
			return txn.Set(keyTenantIndexBuilt, []byte("1"))
		})
		if err != nil {
			if !errors.Is(err, storage.ErrClosed) {
				db.log.Error("building the tenant index of deliveries failed; scoped listings scan every tenant's until the next start", "err", err)
			}
			return
		}
		total += n
		if done {
			if total > 0 {
				db.log.Info("built the tenant index of deliveries", "deliveries", total)
			}
			db.tenantIndexReady.Store(true)
			return
		}
		after = next
	}
}
