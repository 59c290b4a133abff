package badger

import (
	"fmt"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// encodedNotice is a storage.Notice encoded before its transaction, so
// that a retried transaction does not encode it again.
type encodedNotice struct {
	n   *storage.Notice
	ev  []byte
	dls [][]byte
}

// encodeNotices encodes ns and returns them with the bytes they add to a
// transaction.
func encodeNotices(ns ...*storage.Notice) ([]encodedNotice, int, error) {
	var out []encodedNotice
	size := 0
	for _, n := range ns {
		if n == nil {
			continue
		}
		e := encodedNotice{n: n, dls: make([][]byte, len(n.Deliveries))}
		var err error
		if e.ev, err = encode(&n.Event); err != nil {
			return nil, 0, fmt.Errorf("encode notice event: %w", err)
		}
		size += len(e.ev) + 200
		for i := range n.Deliveries {
			if e.dls[i], err = encode(&n.Deliveries[i]); err != nil {
				return nil, 0, fmt.Errorf("encode notice delivery: %w", err)
			}
			size += len(e.dls[i]) + 200
		}
		out = append(out, e)
	}
	return out, size, nil
}

// putNotices writes notices as Ingest writes an event and its
// deliveries, without a dedupe record.
func (db *DB) putNotices(txn *bdg.Txn, ns []encodedNotice) error {
	for _, e := range ns {
		if err := putEvent(txn, e.n.Event.ID, e.ev); err != nil {
			return err
		}
		if err := txn.Set(tenantEventKey(e.n.Event.Tenant, e.n.Event.ID), nil); err != nil {
			return err
		}
		for i := range e.n.Deliveries {
			if err := db.putNewDelivery(txn, &e.n.Deliveries[i], e.dls[i]); err != nil {
				return err
			}
		}
	}
	return nil
}
