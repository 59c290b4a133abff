package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"hookgate/gateway/config"
	"hookgate/gateway/problem"
	"hookgate/inbound"
	"hookgate/storage"
)

// Event is an event as the admin API shows it (SPEC section 5).
type Event struct {
	ID             string            `json:"id"`
	Tenant         string            `json:"tenant"`
	Source         string            `json:"source"`
	EventID        string            `json:"event_id"`
	Type           string            `json:"type"`
	ReceivedAt     string            `json:"received_at"`
	ContentType    string            `json:"content_type"`
	IdempotencyKey string            `json:"idempotency_key"`
	Headers        map[string]string `json:"headers"`
	// Body is the raw body when it is valid UTF-8; BodyBase64 otherwise.
	Body       *string     `json:"body,omitempty"`
	BodyBase64 string      `json:"body_base64,omitempty"`
	Deliveries *[]Delivery `json:"deliveries,omitempty"`
	// State is the event's state over its deliveries (storage.StateOf), in
	// GET /events/{id}; "" when they take more than one page.
	State string `json:"state,omitempty"`
	// DeliveriesNextCursor, when the event has more deliveries than one
	// page shows, continues them: GET /deliveries?event={id}&cursor=….
	DeliveriesNextCursor string `json:"deliveries_next_cursor,omitempty"`
}

func newEventView(ev *storage.Event) Event {
	v := Event{
		ID: ev.ID, Tenant: ev.Tenant, Source: ev.Source, EventID: ev.EventID, Type: ev.Type,
		ReceivedAt: apiTime(ev.ReceivedAt), ContentType: ev.ContentType, IdempotencyKey: ev.IdempotencyKey,
		Headers: ev.Headers,
	}
	if v.Headers == nil {
		v.Headers = map[string]string{}
	}
	if utf8.Valid(ev.Body) {
		s := string(ev.Body)
		v.Body = &s
	} else {
		v.BodyBase64 = base64.StdEncoding.EncodeToString(ev.Body)
	}
	return v
}

// listEvents is GET /events?source=&type=&event_id=&state=&since=&until=&limit=&cursor=,
// newest first; event_id is the provider's event ID, state the event's
// over its deliveries (pending, delivered, failed, unmatched). type is a glob, as an endpoint's event_types are
// ("invoice.*"), as Stripe's list filter is.
func (a *API) listEvents(c *fiber.Ctx) error {
	p, err := parsePage(c, "source", "type", "event_id", "state", "since", "until")
	if err != nil {
		return err
	}
	typ := c.Query("type")
	switch {
	case typ != "" && storage.ValidTypeGlob(typ) != nil:
		return badRequest("type", `must be an event type or a glob of types ("*", "?", "[...]"), e.g. "invoice.*"`)
	case storage.IsTypeGlob(typ) && len(typ) > config.MaxTypeGlob:
		// A glob costs up to its length times a type's per event scanned.
		return badRequest("type", fmt.Sprintf("a glob of types is at most %d bytes", config.MaxTypeGlob))
	}
	state, err := parseEventState("state", c.Query("state"), badRequest)
	if err != nil {
		return err
	}
	evs, next, err := a.d.Store.ListEvents(c.UserContext(), storage.EventFilter{State: state,
		Tenant: who(c).scope(), Source: c.Query("source"), Type: typ, EventID: c.Query("event_id"),
		Since: p.since, Until: p.until, Limit: p.limit, Cursor: p.cursor,
	})
	if err != nil {
		return a.storeError(err, "event")
	}
	out := List[Event]{Data: make([]Event, len(evs)), NextCursor: next}
	for i := range evs {
		out.Data[i] = newEventView(&evs[i])
	}
	return c.JSON(out)
}

// getEvent is GET /events/{id}: the event with its deliveries.
func (a *API) getEvent(c *fiber.Ctx) error {
	ev, err := a.visibleEvent(c)
	if err != nil {
		return err
	}
	// A tenant sees its own deliveries of the event, not those to the
	// operator's alert endpoint (an operational event's).
	ds, next, err := a.d.Store.ListDeliveries(c.UserContext(), storage.DeliveryFilter{Tenant: who(c).scope(), Event: ev.ID, Limit: MaxPageLimit})
	if err != nil {
		return a.storeError(err, "event")
	}
	v := newEventView(&ev)
	views := deliveryViews(ds)
	v.Deliveries, v.DeliveriesNextCursor = &views, next
	if next == "" {
		v.State = string(storage.StateOf(ds))
	}
	return c.JSON(v)
}

// visibleEvent loads the event of the path's id if the token may see it.
// An id whose time is past retention is 410: its payload is gone.
func (a *API) visibleEvent(c *fiber.Ctx) (storage.Event, error) {
	id := c.Params("id")
	ev, err := a.d.Store.GetEvent(c.UserContext(), id)
	// Another tenant's event answers like one that does not exist, also
	// past retention, before the sweep has deleted it (410, not 404).
	hidden := errors.Is(err, storage.ErrNotFound) || err == nil && !who(c).sees(ev.Tenant)
	if hidden && a.pastRetention(id) {
		return storage.Event{}, newAPIError(fiber.StatusGone, "event-expired", "",
			"the event is older than the retention period; its payload was deleted and it cannot be shown or replayed")
	}
	if err != nil {
		return ev, a.storeError(err, "event")
	}
	if hidden {
		return storage.Event{}, notFound("event")
	}
	return ev, nil
}

// pastRetention reports whether an event id was made before the retention
// cutoff. It says nothing about any tenant: any well-formed id qualifies.
func (a *API) pastRetention(id string) bool {
	t, ok := storage.IDTime("evt_", id)
	return ok && t.Before(a.retentionCutoff())
}

// publishRequest is the body of POST /events.
type publishRequest struct {
	Source  string          `json:"source"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
	EventID string          `json:"event_id"`
}

// publishEvent is POST /events: an event published directly, accepted
// exactly like an ingest request of its source (dedupe on the event ID,
// deliveries to every subscribed endpoint) without signature checks. An
// absent event_id is derived like ingest does: the source's event_id
// expression on the payload, else the request's Idempotency-Key, else the
// SHA-256 of the payload. (Without the key, two publishes of one payload
// under two keys were one event.)
func (a *API) publishEvent(c *fiber.Ctx) error {
	var in publishRequest
	if err := decodeJSON(c, &in, false); err != nil {
		return err
	}
	snap, done := a.d.Registry.Use() // until the deliveries are written
	defer done()
	src := snap.Sources[in.Source]
	switch {
	case in.Source == "":
		return unprocessable("source", "required")
	case src == nil || !who(c).sees(src.Tenant):
		return unprocessable("source", "no source with this id")
	case len(in.Payload) == 0 || string(in.Payload) == "null":
		return unprocessable("payload", "required: the event's JSON body")
	case len(in.Payload) > int(a.d.Config.Server.MaxBody):
		return newAPIError(fiber.StatusRequestEntityTooLarge, "body-too-large", "payload",
			fmt.Sprintf("the payload is larger than server.max_body (%d bytes)", a.d.Config.Server.MaxBody))
	}
	res, err := a.d.Publisher.Receive(c.UserContext(), src, snap.ByTenant[src.Tenant], inbound.Inbound{
		Header:     publishHeader(c.Get(headerIdempotencyKey)),
		SkipVerify: true, EventID: in.EventID, Type: in.Type, Body: in.Payload,
		ContentType: fiber.MIMEApplicationJSON, Headers: map[string]string{},
	})

	if err != nil {
		return a.d.Publisher.Answer(c, src.ID, inbound.Received{}, err)
	}
	if res.Replayed && in.Type != "" && a.storedTypeDiffers(c, res.Body, in.Type) {
		// The dedupe record compares payloads; a publish names its type
		// beside the payload, and is the same request only with that too.
		a.d.Publisher.Count(src.ID, "mismatch")
		return problem.Answer(c, fiber.StatusUnprocessableEntity, "idempotency-key-reused", "Unprocessable Entity",
			"this event id was already received with a different type")
	}
	return a.d.Publisher.Answer(c, src.ID, res, nil)
}

// storedTypeDiffers reports whether the event a replayed publish answer
// names is stored with a type other than typ. An event retention has
// purged (or an answer that names none) cannot tell: the stored answer
// stands.
func (a *API) storedTypeDiffers(c *fiber.Ctx, answer []byte, typ string) bool {
	var v struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(answer, &v) != nil || v.ID == "" {
		return false
	}
	ev, err := a.d.Store.GetEvent(c.UserContext(), v.ID)
	return err == nil && ev.Type != typ
}

// publishHeader shows the event-ID rules a publish's Idempotency-Key, and
// no other header of the admin request (its Authorization above all).
type publishHeader string

func (k publishHeader) Get(name string) string {
	if strings.EqualFold(name, headerIdempotencyKey) {
		return string(k)
	}
	return ""
}

// replayRequest is the optional body of POST /events/{id}/replay.
type replayRequest struct {
	Endpoints []string `json:"endpoints"`
}

// replayEvent is POST /events/{id}/replay: new deliveries of a stored
// event, to the named endpoints or to every endpoint that subscribes to it
// now. They carry the event's Idempotency-Key, like every delivery of it.
func (a *API) replayEvent(c *fiber.Ctx) error {
	var in replayRequest
	if err := decodeJSON(c, &in, true); err != nil {
		return err
	}
	ev, err := a.visibleEvent(c)
	if err != nil {
		return err
	}
	// [] names no endpoint: refused, where an absent list means "every
	// subscriber" (null is refused by decodeJSON).
	if in.Endpoints != nil && len(in.Endpoints) == 0 {
		return unprocessable("endpoints", "names no endpoint: leave it out to replay to every endpoint that subscribes now")
	}
	_, done := a.d.Registry.Use() // until the deliveries are written
	defer done()
	targets, err := a.replayTargets(&ev, in.Endpoints)
	if err != nil {
		return err
	}
	ds := storage.NewDeliveries(&ev, targets, a.now())
	ctx, cancel := writeContext(c)
	defer cancel()
	fresh, err := a.notReplayedYet(ctx, c, ds)
	if err != nil {
		return a.storeError(err, "event")
	}
	if err := a.d.Store.Enqueue(ctx, fresh); err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return newAPIError(fiber.StatusGone, "event-expired", "", "the event was deleted by retention")
		}
		return a.storeError(err, "event")
	}
	a.notify(fresh)
	return c.Status(fiber.StatusAccepted).JSON(List[Delivery]{Data: deliveryViews(ds)})
}

// notReplayedYet returns those of a replay's new deliveries ds that are
// still to be written. Under an Idempotency-Key each is named by the key's
// use and its endpoint (storage.KeyedID): the request run again after its
// first run's answer was lost finds what that run made, which takes its
// place in ds as stored, instead of sending the event there once more.
func (a *API) notReplayedYet(ctx context.Context, c *fiber.Ctx, ds []storage.Delivery) ([]storage.Delivery, error) {
	u, ok := usedKey(c)
	if !ok {
		return ds, nil
	}
	parts := func(d *storage.Delivery) []string { return slices.Concat(u.seed, []string{d.Endpoint}) }
	for i := range ds {
		ds[i].ID = storage.KeyedID("dlv_", ds[i].CreatedAt, parts(&ds[i])...)
	}
	if !u.again || len(ds) == 0 {
		return ds, nil
	}
	// The event's deliveries made since the use began, every page of them
	// (other replays may have made many since): ours are keyed by it.
	found := make([]bool, len(ds))
	for f, left := (storage.DeliveryFilter{Event: ds[0].Event, Since: u.since, Limit: MaxPageLimit}), len(ds); left > 0; {
		made, next, err := a.d.Store.ListDeliveries(ctx, f)
		if err != nil {
			return nil, err
		}
		for i := range ds {
			j := slices.IndexFunc(made, func(d storage.Delivery) bool {
				return d.Endpoint == ds[i].Endpoint && storage.IsKeyedID(d.ID, "dlv_", parts(&ds[i])...)
			})
			if !found[i] && j >= 0 {
				ds[i], found[i] = made[j], true
				left--
			}
		}
		if next == "" {
			break
		}
		f.Cursor = next
	}
	var fresh []storage.Delivery
	for i := range ds {
		if !found[i] {
			fresh = append(fresh, ds[i])
		}
	}
	return fresh, nil
}

// replayTargets resolves the endpoints of a replay: the named ones, each an
// enabled endpoint of the event's tenant, or every current subscriber.
func (a *API) replayTargets(ev *storage.Event, names []string) ([]storage.Endpoint, error) {
	eps := a.d.Registry.Current().ByTenant[ev.Tenant]
	if len(names) == 0 {
		return inbound.Subscribers(eps, ev.Tenant, ev.Source, ev.Type), nil
	}
	var out []storage.Endpoint
	for i, name := range names {
		field := fmt.Sprintf("endpoints[%d]", i)
		j := slices.IndexFunc(eps, func(ep storage.Endpoint) bool { return ep.ID == name })
		switch {
		case j < 0:
			return nil, unprocessable(field, "no endpoint with this id in the event's tenant")
		case eps[j].Disabled:
			return nil, newAPIError(fiber.StatusConflict, "endpoint-disabled", field, "the endpoint is disabled; enable it first")
		case slices.ContainsFunc(out, func(ep storage.Endpoint) bool { return ep.ID == name }):
			continue
		}
		out = append(out, eps[j])
	}
	return out, nil
}

// notify wakes the dispatcher for the endpoints of new deliveries.
func (a *API) notify(ds []storage.Delivery) {
	if len(ds) == 0 {
		return
	}
	ids := make([]string, len(ds))
	for i := range ds {
		ids[i] = ds[i].Endpoint
	}
	a.d.Dispatcher.Notify(ids...)
}

// retentionCutoff is when events older than retention were received.
func (a *API) retentionCutoff() time.Time { return a.now().Add(-a.d.Config.Retention.D()) }

// parseEventState reads an event state filter ("" = any); bad makes the
// problem for a value that is none.
func parseEventState(field, v string, bad func(field, detail string) error) (storage.EventState, error) {
	st := storage.EventState(v)
	if v == "" || slices.Contains(storage.EventStates, st) {
		return st, nil
	}
	return "", bad(field, "must be one of pending, delivered, failed, unmatched")
}
