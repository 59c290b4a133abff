package badger

import (
	"errors"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// Event records live under prefixEvent. Stores written before 2026-11-30
// also hold records under legacyPrefixEvent, until retention purges them:
// moving them when a store opens would hold up the start of an upgraded
// gateway for minutes with a month of events. Every legacy record was
// written before every record under prefixEvent, and event IDs grow with
// time, so the legacy range followed by the new one is one time-ordered
// sequence. (A clock set back across the upgrade could break that order
// for the events of those moments; then the operator's newest-first
// listing can put them out of order or skip them; nothing else depends on
// the order across the two ranges.)
var (
	eventPrefixesOldestFirst = [][]byte{legacyPrefixEvent, prefixEvent}
	eventPrefixesNewestFirst = [][]byte{prefixEvent, legacyPrefixEvent}
)

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
