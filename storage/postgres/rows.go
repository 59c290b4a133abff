package postgres

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"hookgate/storage"
)

// How deliveries and events map to rows.

// deliveryInsertCols are the columns a delivery is written to, in the
// order of deliveryArrays and deliveryUnnest.
const deliveryInsertCols = `id, event, tenant, endpoint, idempotency_key, state, attempt_count,
	created_at, next_attempt_at, lease_until, retry_from, retry_base, backoff,
	last_error, last_status, updated_at, due`

// deliveryTypes are the array types of deliveryInsertCols.
var deliveryTypes = []string{"text", "text", "text", "text", "text", "text", "int",
	"bigint", "bigint", "bigint", "bigint", "int", "bigint",
	"bytea", "int", "bigint", "bigint"}

// deliveryUnnest is unnest() over the arrays of deliveryArrays, passed
// as the parameters from $first on.
func deliveryUnnest(first int) string {
	ps := make([]string, len(deliveryTypes))
	for i, t := range deliveryTypes {
		ps[i] = fmt.Sprintf("$%d::%s[]", first+i, t)
	}
	return "unnest(" + strings.Join(ps, ", ") + ")"
}

// deliveryArrays turns deliveries into one array per column.
func deliveryArrays(ds []storage.Delivery) []any {
	n := len(ds)
	var (
		ids, events, tenants, endpoints, keys, states = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		attempts, bases, statuses                     = make([]int32, n), make([]int32, n), make([]int32, n)
		created, next, lease, from, updated, due      = make([]*int64, n), make([]*int64, n), make([]*int64, n), make([]*int64, n), make([]*int64, n), make([]*int64, n)
		backoffs                                      = make([]int64, n)
		errs                                          = make([][]byte, n)
	)
	for i := range ds {
		d := &ds[i]
		ids[i], events[i], tenants[i], endpoints[i], keys[i], states[i] = d.ID, d.Event, d.Tenant, d.Endpoint, d.IdempotencyKey, string(d.State)
		attempts[i], bases[i], statuses[i] = int32(d.AttemptCount), int32(d.RetryBase), int32(d.LastStatus)
		created[i], next[i], lease[i], from[i], updated[i] = nanosOrNull(d.CreatedAt), nanosOrNull(d.NextAttemptAt), nanosOrNull(d.LeaseUntil), nanosOrNull(d.RetryFrom), nanosOrNull(d.UpdatedAt)
		due[i] = dueOf(d)
		backoffs[i] = int64(d.Interval)
		errs[i] = []byte(d.LastError)
	}
	return []any{ids, events, tenants, endpoints, keys, states, attempts, created, next, lease, from, bases, backoffs, errs, statuses, updated, due}
}

// dueOf is where a delivery sits in its endpoint's outbox: its lease
// while delivering, its next attempt while pending, nowhere once final.
func dueOf(d *storage.Delivery) *int64 {
	switch {
	case d.State.Terminal():
		return nil
	case d.State == storage.StateDelivering:
		n := nanos(d.LeaseUntil)
		return &n
	}
	n := nanos(d.NextAttemptAt)
	return &n
}

// deliveryCols are the columns scanDelivery reads, for a table aliased d.
const deliveryCols = `d.id, d.event, d.tenant, d.endpoint, d.idempotency_key, d.state, d.attempt_count,
	d.created_at, d.next_attempt_at, d.lease_until, d.retry_from, d.retry_base, d.backoff,
	d.last_error, d.last_status, d.updated_at`

// deliveryDest is where a row of deliveryCols is scanned to.
type deliveryDest struct {
	d                                   storage.Delivery
	state                               string
	created, next, lease, from, updated *int64
	backoff                             int64
	lastError                           []byte
}

func (x *deliveryDest) targets() []any {
	d := &x.d
	return []any{&d.ID, &d.Event, &d.Tenant, &d.Endpoint, &d.IdempotencyKey, &x.state, &d.AttemptCount,
		&x.created, &x.next, &x.lease, &x.from, &d.RetryBase, &x.backoff,
		&x.lastError, &d.LastStatus, &x.updated}
}

func (x *deliveryDest) delivery() storage.Delivery {
	d := x.d
	d.State = storage.DeliveryState(x.state)
	d.CreatedAt, d.NextAttemptAt, d.LeaseUntil = fromNanos(x.created), fromNanos(x.next), fromNanos(x.lease)
	d.RetryFrom, d.UpdatedAt = fromNanos(x.from), fromNanos(x.updated)
	d.Interval = time.Duration(x.backoff)
	d.LastError = string(x.lastError)
	return d
}

// scanDeliveries reads rows of deliveryCols.
func scanDeliveries(rows pgx.Rows) ([]storage.Delivery, error) {
	defer rows.Close()
	var out []storage.Delivery
	for rows.Next() {
		var x deliveryDest
		if err := rows.Scan(x.targets()...); err != nil {
			return nil, err
		}
		out = append(out, x.delivery())
	}
	return out, rows.Err()
}

// eventCols are the columns scanEvent reads, for a table aliased e.
const eventCols = `e.id, e.tenant, e.source, e.event_id, e.type, e.received_at, e.content_type,
	e.header_names, e.header_values, e.body, e.idempotency_key`

// eventDest is where a row of eventCols is scanned to.
type eventDest struct {
	ev                        storage.Event
	eventID, typ, contentType []byte
	received                  int64
	names, values             [][]byte
	body                      []byte
}

func (x *eventDest) targets() []any {
	e := &x.ev
	return []any{&e.ID, &e.Tenant, &e.Source, &x.eventID, &x.typ, &x.received, &x.contentType,
		&x.names, &x.values, &x.body, &e.IdempotencyKey}
}

func (x *eventDest) event() storage.Event {
	ev := x.ev
	ev.EventID, ev.Type, ev.ContentType = string(x.eventID), string(x.typ), string(x.contentType)
	ev.ReceivedAt = time.Unix(0, x.received).UTC()
	ev.Body = orNil(x.body)
	if len(x.names) > 0 {
		ev.Headers = make(map[string]string, len(x.names))
		for i, k := range x.names {
			if i < len(x.values) {
				ev.Headers[string(k)] = string(x.values[i])
			}
		}
	}
	return ev
}
