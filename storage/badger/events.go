package badger

import (
	"encoding/binary"
	"errors"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// Event records live under prefixEvent. Stores written by older builds
// also hold records under legacyPrefixEvent, until retention purges them:
// moving them when a store opens would hold up the start of an upgraded
// gateway for minutes with a month of events. Listings merge the two
// ranges by ID (scanIDsNewestFirst), and the purge checks each range
// against the cutoff, so nothing relies on every legacy record being
// older than every new one (a clock set back across the upgrade, or a
// downgrade and upgrade again, would break that).
var eventPrefixes = [][]byte{legacyPrefixEvent, prefixEvent}

func legacyEventKey(id string) []byte { return key(legacyPrefixEvent, id) }

// getEvent reads an event record, under either key, and joins its parts.
func getEvent(txn *bdg.Txn, id string, ev *storage.Event) error {
	for _, k := range [][]byte{eventKey(id), legacyEventKey(id)} {
		item, err := txn.Get(k)
		if errors.Is(err, bdg.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		return item.Value(func(b []byte) error {
			if n, ok := eventParts(b); ok {
				rec, err := joinEventParts(txn, id, n)
				if err != nil {
					return err
				}
				b = rec
			}
			return decode(b, ev)
		})
	}
	return storage.ErrNotFound
}

// An event record of MaxInlineRecord bytes or more, an incompressible
// body near the default max_body among them (the record adds its headers
// and ids), went to Badger's value log, whose space this engine never
// reclaims: such events took their disk for good, whatever retention
// deleted. Up to maxPartedRecord, such a record is kept in the LSM tree
// in parts instead: the event's key holds codecParts and the number of
// parts, each under eventPartKey. Larger ones (a max_body raised past
// 1MiB) still go to the value log whole: Badger refuses a transaction of
// more than ~15% of a memtable, and only a value-log value does not count
// its bytes there.
const (
	codecParts      = 3
	eventPartSize   = MaxInlineRecord - 1 // Badger keeps a value inline below its threshold
	maxPartedRecord = 2 * eventPartSize
)

// putEvent writes an event's record (encodeEvent's), in parts when it is
// too big to stay in the LSM tree whole.
func putEvent(txn *bdg.Txn, id string, rec []byte) error {
	if len(rec) < MaxInlineRecord || len(rec) > maxPartedRecord {
		return txn.Set(eventKey(id), rec)
	}
	n := (len(rec) + eventPartSize - 1) / eventPartSize
	for i := range n {
		if err := txn.Set(eventPartKey(id, i), rec[i*eventPartSize:min(len(rec), (i+1)*eventPartSize)]); err != nil {
			return err
		}
	}
	return txn.Set(eventKey(id), binary.AppendUvarint([]byte{codecParts}, uint64(n)))
}

// eventParts reads the number of parts from a record's first value.
func eventParts(b []byte) (int, bool) {
	if len(b) == 0 || b[0] != codecParts {
		return 0, false
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n == 0 || n > maxPartedRecord/eventPartSize {
		return 0, true // damaged: joinEventParts refuses it
	}
	return int(n), true
}

// eventPartKeys lists the keys of an event record's parts.
func eventPartKeys(txn *bdg.Txn, id string) [][]byte {
	p := append(key(prefixEventPart, id), sep)
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: p, PrefetchValues: false})
	defer it.Close()
	var ks [][]byte
	for it.Rewind(); it.Valid(); it.Next() {
		ks = append(ks, it.Item().KeyCopy(nil))
	}
	return ks
}

// joinEventParts reads an event record's n parts back into one.
func joinEventParts(txn *bdg.Txn, id string, n int) ([]byte, error) {
	if n == 0 {
		return nil, errCodec
	}
	var rec []byte
	for i := range n {
		item, err := txn.Get(eventPartKey(id, i))
		if errors.Is(err, bdg.ErrKeyNotFound) {
			return nil, errCodec // a part lost: the record is unreadable
		}
		if err != nil {
			return nil, err
		}
		if err := item.Value(func(b []byte) error { rec = append(rec, b...); return nil }); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// hasEvent reports whether an event record exists, under either key.
func hasEvent(txn *bdg.Txn, id string) (bool, error) {
	for _, k := range [][]byte{eventKey(id), legacyEventKey(id)} {
		_, err := txn.Get(k)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, bdg.ErrKeyNotFound) {
			return false, err
		}
	}
	return false, nil
}
