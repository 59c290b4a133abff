package admin

import (
	"errors"
	"slices"
	"time"

	"github.com/gofiber/fiber/v2"

	"hookgate/storage"
)

// Delivery is a delivery as the admin API shows it (SPEC section 5).
type Delivery struct {
	ID             string `json:"id"`
	Event          string `json:"event"`
	Tenant         string `json:"tenant"`
	Endpoint       string `json:"endpoint"`
	IdempotencyKey string `json:"idempotency_key"`
	State          string `json:"state"`
	AttemptCount   int    `json:"attempt_count"`
	// NextAttemptAt is when the next attempt is due; absent once the
	// delivery is final.
	NextAttemptAt string     `json:"next_attempt_at,omitempty"`
	LastStatus    int        `json:"last_status,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	CreatedAt     string     `json:"created_at"`
	UpdatedAt     string     `json:"updated_at"`
	Attempts      *[]Attempt `json:"attempts,omitempty"`
}

// Attempt is one attempt of a delivery.
type Attempt struct {
	N          int     `json:"n"`
	At         string  `json:"at"`
	StatusCode int     `json:"status_code"`
	LatencyMS  float64 `json:"latency_ms"`
	Error      string  `json:"error"`
	Response   string  `json:"response"`
}

func newDeliveryView(d *storage.Delivery) Delivery {
	v := Delivery{
		ID: d.ID, Event: d.Event, Tenant: d.Tenant, Endpoint: d.Endpoint, IdempotencyKey: d.IdempotencyKey,
		State: string(d.State), AttemptCount: d.AttemptCount, LastStatus: d.LastStatus, LastError: d.LastError,
		CreatedAt: apiTime(d.CreatedAt), UpdatedAt: apiTime(d.UpdatedAt),
	}
	if !d.State.Terminal() {
		v.NextAttemptAt = apiTime(d.NextAttemptAt)
	}
	return v
}

func deliveryViews(ds []storage.Delivery) []Delivery {
	out := make([]Delivery, len(ds))
	for i := range ds {
		out[i] = newDeliveryView(&ds[i])
	}
	return out
}

// newAttemptView shows an attempt as stored: the sender keeps the first
// 1 KiB of the response, its invalid UTF-8 bytes replaced by U+FFFD (3
// bytes each), so the excerpt may be longer than 1 KiB. A second cut here
// at 1 KiB dropped the end of such an excerpt, and split a character.
func newAttemptView(at *storage.Attempt) Attempt {
	return Attempt{
		N: at.N, At: apiTime(at.At), StatusCode: at.StatusCode, Error: at.Error, Response: at.Response,
		LatencyMS: float64(at.Latency.Round(time.Microsecond)) / float64(time.Millisecond),
	}
}

// deliveryStates are the values of ?status= and of a replay's status.
var deliveryStates = []storage.DeliveryState{
	storage.StatePending, storage.StateDelivering, storage.StateSucceeded, storage.StateFailed, storage.StateCancelled,
}

// parseState checks a delivery state filter ("" = any).
func parseState(field, s string, bad func(field, detail string) error) (storage.DeliveryState, error) {
	st := storage.DeliveryState(s)
	if s != "" && !slices.Contains(deliveryStates, st) {
		return "", bad(field, "must be one of pending, delivering, succeeded, failed, cancelled")
	}
	return st, nil
}

// listDeliveries is GET /deliveries?endpoint=&status=&event=&since=&until=,
// newest first.
func (a *API) listDeliveries(c *fiber.Ctx) error {
	p, err := parsePage(c, "endpoint", "status", "event", "since", "until")
	if err != nil {
		return err
	}
	st, err := parseState("status", c.Query("status"), badRequest)
	if err != nil {
		return err
	}
	ds, next, err := a.d.Store.ListDeliveries(c.UserContext(), storage.DeliveryFilter{
		Tenant: who(c).scope(), Endpoint: c.Query("endpoint"), State: st, Event: c.Query("event"),
		Since: p.since, Until: p.until, Limit: p.limit, Cursor: p.cursor,
	})
	if err != nil {
		return a.storeError(err, "delivery")
	}
	return c.JSON(List[Delivery]{Data: deliveryViews(ds), NextCursor: next})
}

// getDelivery is GET /deliveries/{id}: the delivery with every attempt.
func (a *API) getDelivery(c *fiber.Ctx) error {
	d, err := a.visibleDelivery(c)
	if err != nil {
		return err
	}
	ats, err := a.d.Store.ListAttempts(c.UserContext(), d.ID)
	if err != nil {
		return a.storeError(err, "delivery")
	}
	v := newDeliveryView(&d)
	views := make([]Attempt, len(ats))
	for i := range ats {
		views[i] = newAttemptView(&ats[i])
	}
	v.Attempts = &views
	return c.JSON(v)
}

func (a *API) visibleDelivery(c *fiber.Ctx) (storage.Delivery, error) {
	d, err := a.d.Store.GetDelivery(c.UserContext(), c.Params("id"))
	if err != nil {
		return d, a.storeError(err, "delivery")
	}
	if !who(c).sees(d.Tenant) {
		return d, notFound("delivery")
	}
	return d, nil
}

// retryDelivery is POST /deliveries/{id}/retry: due now, with a fresh
// retry budget, whatever its state but cancelled or in flight (409). Its
// endpoint must exist and be enabled, or the delivery would wait for nobody.
func (a *API) retryDelivery(c *fiber.Ctx) error {
	// It takes no body: one with fields (an "endpoint" to send to) was
	// ignored, and the delivery went to its own endpoint.
	if err := decodeJSON(c, &struct{}{}, true); err != nil {
		return err
	}
	d, err := a.visibleDelivery(c)
	if err != nil {
		return err
	}
	if u, ok := usedKey(c); ok && u.again && d.State == storage.StateSucceeded && !d.RetryFrom.Before(u.since) {
		// Retried and delivered since this use of its Idempotency-Key
		// began: by the request's first run, whose answer was lost (or by
		// another retry meanwhile). Retried again, it would be sent once
		// more, for nothing.
		return c.Status(fiber.StatusAccepted).JSON(newDeliveryView(&d))
	}
	snap, done := a.d.Registry.Use() // until the retry is written
	defer done()
	eps := snap.Endpoints
	// The id alone is not enough: ids are global, and after a delete
	// another tenant may have taken it, or the same tenant made a new
	// endpoint with it, which did not subscribe to this event (a delivery
	// is never older than its endpoint).
	j := slices.IndexFunc(eps, func(ep storage.Endpoint) bool { return ep.ID == d.Endpoint && ep.Tenant == d.Tenant })
	switch {
	case j < 0 || d.CreatedAt.Before(eps[j].CreatedAt):
		return newAPIError(fiber.StatusConflict, "endpoint-deleted", "", "the delivery's endpoint no longer exists")
	case eps[j].Disabled:
		return newAPIError(fiber.StatusConflict, "endpoint-disabled", "", "the delivery's endpoint is disabled; enable it first")
	case d.State == storage.StateCancelled:
		return newAPIError(fiber.StatusConflict, "delivery-cancelled", "", "a cancelled delivery cannot be retried; replay its event instead")
	}
	ctx, cancel := writeContext(c)
	defer cancel()
	now := a.now()
	retried, err := a.d.Store.Retry(ctx, d.ID, now)
	if errors.Is(err, storage.ErrConflict) {
		// Claimed or cancelled since it was read: look again.
		if cur, gerr := a.d.Store.GetDelivery(ctx, d.ID); gerr == nil {
			d = cur
		}
		if d.State == storage.StateCancelled {
			return newAPIError(fiber.StatusConflict, "delivery-cancelled", "", "a cancelled delivery cannot be retried; replay its event instead")
		}
		// Being delivered: its attempt's outcome comes first, then a retry
		// can follow.
		e := newAPIError(fiber.StatusConflict, "delivery-in-flight", "", "the delivery is being delivered now; retry once its attempt has ended")
		// By then the attempt's lease is over: its outcome is recorded, or,
		// if that write failed, the delivery may be retried.
		e.retryAfter = max(1, int(d.LeaseUntil.Sub(now).Seconds()+1))
		return e
	}
	if err != nil {
		return a.storeError(err, "delivery")
	}
	d = retried
	a.d.Dispatcher.RetryNow(d.Endpoint)
	return c.Status(fiber.StatusAccepted).JSON(newDeliveryView(&d))
}
