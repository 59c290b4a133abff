package admin

import (
	"errors"
	"time"

	"github.com/gofiber/fiber/v2"

	"hookgate/storage"
)

// Replay is a bulk replay job: its filters and its progress. Matched
// counts the events that had at least one endpoint to replay to; enqueued
// counts the new deliveries.
type Replay struct {
	ID         string `json:"id"`
	Tenant     string `json:"tenant,omitempty"`
	State      string `json:"state"`
	Matched    int    `json:"matched"`
	Enqueued   int    `json:"enqueued"`
	Source     string `json:"source,omitempty"`
	Endpoint   string `json:"endpoint,omitempty"`
	Status     string `json:"status,omitempty"`
	EventState string `json:"event_state,omitempty"`
	Since      string `json:"since,omitempty"`
	Until      string `json:"until,omitempty"`
	Error      string `json:"error,omitempty"`
	CreatedAt  string `json:"created_at"`
	UpdatedAt  string `json:"updated_at"`
}

func newReplayView(j *storage.ReplayJob) Replay {
	return Replay{
		ID: j.ID, Tenant: j.Tenant, State: string(j.State), Matched: j.Matched, Enqueued: j.Enqueued,
		Source: j.Source, Endpoint: j.Endpoint, Status: j.Status, EventState: string(j.EventState), Since: apiTime(j.Since), Until: apiTime(j.Until),
		Error: j.Error, CreatedAt: apiTime(j.CreatedAt), UpdatedAt: apiTime(j.UpdatedAt),
	}
}

// replayJobRequest is the body of POST /replays: filters, at least one.
type replayJobRequest struct {
	Source   string `json:"source"`
	Endpoint string `json:"endpoint"`
	Status   string `json:"status"`
	// EventState selects events by their state (storage.StateOf), e.g.
	// unmatched: deliver what arrived before its endpoint existed.
	EventState string `json:"event_state"`
	Since      string `json:"since"`
	Until      string `json:"until"`
}

// createReplay is POST /replays: a bulk replay of the events that match
// the filters (source, received in [since, until]), to the endpoints that
// subscribe to them now, or with status to those whose latest delivery of
// the event is in that state (e.g. failed); endpoint narrows it to one. The
// job is stored, then runs in the background: 202 with the job.
func (a *API) createReplay(c *fiber.Ctx) error {
	var in replayJobRequest
	if err := decodeJSON(c, &in, false); err != nil {
		return err
	}
	now := a.now()
	id, derived := newID(c, "rpl_", now)
	job := storage.ReplayJob{
		ID: id, Tenant: who(c).tenant, Source: in.Source, Endpoint: in.Endpoint,
		Status: in.Status, EventState: storage.EventState(in.EventState), State: storage.ReplayRunning, CreatedAt: now, UpdatedAt: now,
	}
	if derived {
		// Run again: the first run's job is the answer, and must not be
		// started twice, whatever has changed since (the filters are
		// checked for a new job).
		old, err := a.d.Store.GetReplay(c.UserContext(), job.ID)
		switch {
		case err == nil && who(c).sees(old.Tenant):
			if old.State == storage.ReplayRunning {
				a.d.Replays.Submit(old.ID) // unless it runs (a write whose outcome was unknown)
			}
			return c.Status(fiber.StatusAccepted).JSON(newReplayView(&old))
		case err == nil:
			return newAPIError(fiber.StatusConflict, "already-exists", "", "a replay job with this id already exists")
		case !errors.Is(err, storage.ErrNotFound):
			return a.storeError(err, "replay")
		}
	}
	if err := a.replayFilters(c, &in, &job); err != nil {
		return err
	}
	ctx, cancel := writeContext(c)
	defer cancel()
	if err := a.d.Store.CreateReplay(ctx, &job); errors.Is(err, storage.ErrConflict) && derived {
		// The first run of this key use, still running when this one took
		// the key over after its lease, wrote the job meanwhile: that job
		// is the answer, started once.
		old, err := a.d.Store.GetReplay(ctx, job.ID)
		if err != nil {
			return a.storeError(err, "replay")
		}
		return c.Status(fiber.StatusAccepted).JSON(newReplayView(&old))
	} else if errors.Is(err, storage.ErrConflict) {
		return newAPIError(fiber.StatusConflict, "already-exists", "", "a replay job with this id already exists")
	} else if err != nil {
		return a.storeError(err, "replay")
	}
	a.d.Replays.Submit(job.ID)
	return c.Status(fiber.StatusAccepted).JSON(newReplayView(&job))
}

// replayFilters validates the filters and sets the job's tenant: the
// token's, or for the operator the tenant of the source or endpoint named
// ("" = every tenant).
func (a *API) replayFilters(c *fiber.Ctx, in *replayJobRequest, job *storage.ReplayJob) error {
	if *in == (replayJobRequest{}) {
		return unprocessable("", "name at least one filter: source, endpoint, status, event_state, since or until")
	}
	var err error
	if job.Since, err = bodyTime("since", in.Since); err != nil {
		return err
	}
	if job.Until, err = bodyTime("until", in.Until); err != nil {
		return err
	}
	if !job.Since.IsZero() && !job.Until.IsZero() && job.Since.After(job.Until) {
		return unprocessable("since", "must not be after until")
	}
	if _, err := parseState("status", in.Status, unprocessable); err != nil {
		return err
	}
	if _, err := parseEventState("event_state", in.EventState, unprocessable); err != nil {
		return err
	}
	if in.Source != "" {
		src, err := a.d.Store.GetSource(c.UserContext(), in.Source)
		if err := a.reference(c, err, src.Tenant, "source"); err != nil {
			return err
		}
		job.Tenant = src.Tenant
	}
	if in.Endpoint != "" {
		ep, err := a.d.Store.GetEndpoint(c.UserContext(), in.Endpoint)
		if err := a.reference(c, err, ep.Tenant, "endpoint"); err != nil {
			return err
		}
		switch {
		case job.Tenant != "" && ep.Tenant != job.Tenant:
			return unprocessable("endpoint", "belongs to another tenant than the source")
		case ep.Disabled:
			return newAPIError(fiber.StatusConflict, "endpoint-disabled", "endpoint", "the endpoint is disabled; enable it first")
		}
		job.Tenant = ep.Tenant
	}
	return nil
}

// reference checks a resource named in a body: it must exist and be
// visible to the token (both failures read the same).
func (a *API) reference(c *fiber.Ctx, err error, tenant, field string) error {
	switch {
	case errors.Is(err, storage.ErrNotFound) || (err == nil && !who(c).sees(tenant)):
		return unprocessable(field, "no "+field+" with this id")
	case err != nil:
		return a.storeError(err, field)
	}
	return nil
}

func bodyTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := parseRFC3339(s)
	if err != nil {
		return time.Time{}, unprocessable(field, "must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
	}
	if t.IsZero() && field == "until" {
		return time.Time{}, unprocessable(field, zeroTimeDetail)
	}
	return t.UTC(), nil
}

// getReplay is GET /replays/{id}: the job's progress.
func (a *API) getReplay(c *fiber.Ctx) error {
	job, err := a.d.Store.GetReplay(c.UserContext(), c.Params("id"))
	if err != nil {
		return a.storeError(err, "replay")
	}
	if !who(c).sees(job.Tenant) {
		return notFound("replay")
	}
	return c.JSON(newReplayView(&job))
}
