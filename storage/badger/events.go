package badger

import (
	"errors"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// Event records live under prefixEvent. Stores written before 2026-11-30
// also hold records under legacyPrefixEvent, until retention purges them:
// moving them when a store opens would hold up the start of an upgraded
// gateway for minutes with a month of events. Listings merge the two
// ranges by ID (scanIDsNewestFirst), and the purge checks each range
// against the cutoff, so nothing relies on every legacy record being
// older than every new one (a clock set back across the upgrade, or a
// downgrade and upgrade again, would break that).
var eventPrefixes = [][]byte{legacyPrefixEvent, prefixEvent}

func legacyEventKey(id string) []byte { return key(legacyPrefixEvent, id) }

// getEvent reads an event record, under either key.
func getEvent(txn *bdg.Txn, id string, ev *storage.Event) error {
	err := getRecord(txn, eventKey(id), ev)
	if errors.Is(err, storage.ErrNotFound) {
		err = getRecord(txn, legacyEventKey(id), ev)
	}
	return err
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
