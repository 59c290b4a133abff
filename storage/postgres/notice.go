package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"hookgate/storage"
)

// eventInsert is the INSERT of one event from the parameters from $first
// on (eventArgs), as a SELECT so that a WHERE may follow it.
func eventInsert(first int) string {
	ps := make([]string, 12)
	for i := range ps {
		ps[i] = fmt.Sprintf("$%d", first+i)
	}
	return `INSERT INTO events (id, tenant, source, event_id, type, received_at, content_type,
		header_names, header_values, body, idempotency_key, weight)
	SELECT ` + strings.Join(ps, ", ")
}

// eventArgs are the parameters of eventInsert.
func eventArgs(ev *storage.Event) []any {
	names, values := headerArrays(ev.Headers)
	return []any{ev.ID, ev.Tenant, ev.Source, []byte(ev.EventID), []byte(ev.Type), nanos(ev.ReceivedAt),
		[]byte(ev.ContentType), names, values, orEmpty(ev.Body), ev.IdempotencyKey, eventWeight(ev)}
}

// insertNotice writes a notice's event and deliveries in tx.
func insertNotice(ctx context.Context, tx pgx.Tx, n *storage.Notice) error {
	if n == nil {
		return nil
	}
	if _, err := tx.Exec(ctx, eventInsert(1), eventArgs(&n.Event)...); err != nil {
		return err
	}
	return insertDeliveries(ctx, tx, n.Deliveries)
}

// appendNotice adds to an outcome's statement (sql, with its parameters
// args) the CTEs that write n, named after name, if the condition cond
// over the statement's other CTEs holds. It returns the parameters.
func appendNotice(sql *strings.Builder, args []any, name string, n *storage.Notice, cond string) []any {
	fmt.Fprintf(sql, `, %se AS (
	%s
	WHERE %s
	RETURNING id
)`, name, eventInsert(len(args)+1), cond)
	args = append(args, eventArgs(&n.Event)...)
	if len(n.Deliveries) > 0 {
		fmt.Fprintf(sql, `, %sd AS (
	INSERT INTO deliveries (`+deliveryInsertCols+`)
	SELECT u.* FROM %s AS u WHERE EXISTS (SELECT 1 FROM %se)
)`, name, deliveryUnnest(len(args)+1), name)
		args = append(args, deliveryArrays(n.Deliveries)...)
	}
	return args
}
