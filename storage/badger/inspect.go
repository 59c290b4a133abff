package badger

import (
	"context"
	"errors"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// Page sizes for list calls (storage's).
const (
	DefaultLimit = storage.DefaultPageLimit
	MaxLimit     = storage.MaxPageLimit
)

// GetEvent reads one event.
func (db *DB) GetEvent(ctx context.Context, id string) (storage.Event, error) {
	var ev storage.Event
	err := db.view(func(txn *bdg.Txn) error { return getEvent(txn, id, &ev) })
	return ev, err
}

// GetDelivery reads one delivery.
func (db *DB) GetDelivery(ctx context.Context, id string) (storage.Delivery, error) {
	var d storage.Delivery
	err := db.view(func(txn *bdg.Txn) error { return getRecord(txn, deliveryKey(id), &d) })
	return d, err
}

// ListAttempts returns a delivery's attempts, first to last.
func (db *DB) ListAttempts(ctx context.Context, dlv string) ([]storage.Attempt, error) {
	var out []storage.Attempt
	p := append(key(prefixAttempt, dlv), sep)
	err := db.view(func(txn *bdg.Txn) error {
		return scanRecords(txn, p, func() any {
			out = append(out, storage.Attempt{})
			return &out[len(out)-1]
		})
	})
	return out, err
}

// ListEvents returns a page of events, newest first.
func (db *DB) ListEvents(ctx context.Context, f storage.EventFilter) ([]storage.Event, string, error) {
	ps := eventPrefixes
	if f.Tenant != "" {
		ps = [][]byte{append(key(prefixTenantEvent, f.Tenant), sep)}
	}
	q := pageQuery{prefixes: ps, idPrefix: "evt_", cursor: f.Cursor, since: f.Since, until: f.Until, limit: f.Limit}
	return listPage(db, q, func(txn *bdg.Txn, id string) (storage.Event, bool, error) {
		var ev storage.Event
		err := getEvent(txn, id, &ev)
		if errors.Is(err, storage.ErrNotFound) {
			return ev, false, nil // an index key without its record: skipped
		}
		if errors.Is(err, errCodec) {
			// One damaged record must not fail every page it is on,
			// nor every bulk replay over it.
			db.log.Error("a listing skipped an unreadable event record", "event", id, "err", err)
			return ev, false, nil
		}
		return ev, (f.Source == "" || ev.Source == f.Source) && (f.Type == "" || storage.MatchType(f.Type, ev.Type)) &&
			(f.EventID == "" || ev.EventID == f.EventID) &&
			within(ev.ReceivedAt, f.Since, f.Until), err
	}, func(ev *storage.Event) string { return ev.ID }, eventBytes)
}

// eventBytes is what an event weighs against storage.PageBytes.
func eventBytes(ev *storage.Event) int {
	n := len(ev.Body)
	for k, v := range ev.Headers {
		n += len(k) + len(v)
	}
	return n
}

// ListDeliveries returns a page of deliveries, newest first. A tenant's
// listing looks only at that tenant's deliveries: those of one of its
// events, or its tenant index (tenantindex.go).
func (db *DB) ListDeliveries(ctx context.Context, f storage.DeliveryFilter) ([]storage.Delivery, string, error) {
	p := prefixDelivery
	unbounded := false
	switch {
	case f.Event != "":
		if f.Tenant != "" {
			var ev storage.Event
			err := db.view(func(txn *bdg.Txn) error { return getEvent(txn, f.Event, &ev) })
			if errors.Is(err, storage.ErrNotFound) || err == nil && ev.Tenant != f.Tenant {
				return nil, "", nil
			}
			if err != nil {
				return nil, "", err
			}
		}
		p = append(key(prefixEventDelivery, f.Event), sep)
	case f.Tenant != "" && db.tenantIndexReady.Load():
		p = append(key(prefixTenantDelivery, f.Tenant), sep)
	case f.Tenant != "":
		// The index is still being built: every tenant's deliveries, and
		// no budget, whose short pages would tell where others' records are.
		unbounded = true
		if f.Endpoint != "" {
			p = append(key(prefixEndpointDelivery, f.Endpoint), sep)
		}
	case f.Endpoint != "":
		p = append(key(prefixEndpointDelivery, f.Endpoint), sep)
	}
	q := pageQuery{prefixes: [][]byte{p}, idPrefix: "dlv_", cursor: f.Cursor, since: f.Since, until: f.Until, limit: f.Limit, unbounded: unbounded}
	return listPage(db, q, func(txn *bdg.Txn, id string) (storage.Delivery, bool, error) {
		d, err := getDelivery(txn, id)
		if errors.Is(err, storage.ErrNotFound) {
			return d, false, nil // an index key without its record: skipped
		}
		if errors.Is(err, errCodec) {
			// One damaged record must not fail every page it is on.
			db.log.Error("a listing skipped an unreadable delivery record", "delivery", id, "err", err)
			return d, false, nil
		}
		match := (f.Tenant == "" || d.Tenant == f.Tenant) && (f.Endpoint == "" || d.Endpoint == f.Endpoint) &&
			(f.Event == "" || d.Event == f.Event) && (f.State == "" || d.State == f.State) &&
			within(d.CreatedAt, f.Since, f.Until)
		return d, match, err
	}, func(d *storage.Delivery) string { return d.ID }, nil)
}

// within reports whether t is in [since, until] (a zero bound is open).
// The scan bounds ids by their time in whole milliseconds; this is exact.
func within(t, since, until time.Time) bool {
	return (since.IsZero() || !t.Before(since)) && (until.IsZero() || !t.After(until))
}

// pageQuery is one page of a newest-first listing over time-ordered IDs.
type pageQuery struct {
	prefixes     [][]byte // keys end in the IDs; merged by ID
	idPrefix     string   // "evt_", "dlv_"
	cursor       string
	since, until time.Time
	limit        int
	// unbounded lifts listScanBudget: for a scan over other tenants'
	// records, where a page cut short would tell where theirs are.
	unbounded bool
}

// listScanBudget bounds the records one page looks at. A filter that
// matches few of the records scanned (a rare type, a state) would
// otherwise read the whole store for one request; past the budget the page ends short, even empty, with a cursor
// after the last record looked at. It is above MaxLimit, so a page that
// every record matches is always full.
var listScanBudget = 10_000

// listPage loads the records of a page, keeping those load says match; the
// cursor is the last ID returned when there is more, or the last ID looked
// at when the scan budget ran out first. weigh, if not nil, sizes a record
// against storage.PageBytes: the page ends before the one that would
// pass it.
func listPage[T any](db *DB, q pageQuery, load func(txn *bdg.Txn, id string) (T, bool, error), idOf func(*T) string, weigh func(*T) int) ([]T, string, error) {
	limit := storage.PageLimit(q.limit)
	after, err := storage.DecodeCursor(q.cursor, q.idPrefix)
	if err != nil {
		return nil, "", err
	}
	var out []T
	more := false
	examined, stoppedAt, bytes := 0, "", 0
	err = db.view(func(txn *bdg.Txn) error {
		return scanIDsNewestFirst(txn, q.prefixes, after, q.idPrefix, q.since, q.until, func(id string) (bool, error) {
			rec, match, err := load(txn, id)
			if err != nil {
				return false, err
			}
			if match {
				n := 0
				if weigh != nil {
					n = weigh(&rec)
				}
				if len(out) == limit || len(out) > 0 && bytes+n > storage.PageBytes {
					more = true
					return false, nil
				}
				out, bytes = append(out, rec), bytes+n
			}
			// Out of budget: stop after this record, returned or not,
			// even with a full page (looking for one more match to tell
			// whether there is a next page is a scan too).
			if examined++; examined >= listScanBudget && !q.unbounded {
				more, stoppedAt = true, id
				return false, nil
			}
			return true, nil
		})
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	switch {
	case stoppedAt != "":
		next = storage.EncodeCursor(stoppedAt)
	case more:
		next = storage.EncodeCursor(idOf(&out[len(out)-1]))
	}
	return out, next, nil
}

// scanIDsNewestFirst walks the time-ordered IDs that end the keys under
// the prefixes, newest first, merged by ID across the prefixes (an ID under
// several is seen once), starting after the cursor ID after, within
// [since, until] at whole milliseconds, until fn returns false.
func scanIDsNewestFirst(txn *bdg.Txn, prefixes [][]byte, after, idPrefix string, since, until time.Time, fn func(id string) (bool, error)) error {
	its := make([]*bdg.Iterator, len(prefixes))
	for i, p := range prefixes {
		its[i] = txn.NewIterator(bdg.IteratorOptions{Prefix: p, Reverse: true})
		defer its[i].Close()
		seek := append(append([]byte(nil), p...), 0xff)
		if after != "" {
			seek = append(append([]byte(nil), p...), after...)
		}
		its[i].Seek(seek)
	}
	idAt := func(i int) string { return string(its[i].Item().Key()[len(prefixes[i]):]) }
	for {
		newest := -1 // the iterator at the greatest ID
		for i, it := range its {
			if it.Valid() && (newest < 0 || idAt(i) > idAt(newest)) {
				newest = i
			}
		}
		if newest < 0 {
			return nil
		}
		id := idAt(newest)
		for i, it := range its {
			if it.Valid() && idAt(i) == id {
				it.Next()
			}
		}
		if after != "" && id == after {
			continue
		}
		t, ok := storage.IDTime(idPrefix, id)
		if !ok {
			continue
		}
		if !until.IsZero() && t.UnixMilli() > until.UnixMilli() {
			continue
		}
		if !since.IsZero() && t.UnixMilli() < since.UnixMilli() {
			return nil
		}
		if cont, err := fn(id); err != nil || !cont {
			return err
		}
	}
}
