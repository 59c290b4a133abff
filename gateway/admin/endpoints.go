package admin

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gofiber/fiber/v2"

	"hookgate/gateway/config"
	"hookgate/outbound"
	"hookgate/storage"
)

// defaultRotationGrace is how long an endpoint's old secret keeps signing
// after a rotation when the request names no grace.
const defaultRotationGrace = 24 * time.Hour

// Endpoint is an endpoint as the admin API shows it: the config keys
// of SPEC section 2, durations as Go duration strings, plus its state.
// Secret is the current signing secret (the receiver needs it to verify).
type Endpoint struct {
	ID             string            `json:"id"`
	Tenant         string            `json:"tenant"`
	URL            string            `json:"url"`
	Secret         string            `json:"secret"`
	Sources        []string          `json:"sources"`
	EventTypes     []string          `json:"event_types"`
	Headers        map[string]string `json:"headers"`
	Timeout        string            `json:"timeout"`
	MaxInFlight    int               `json:"max_in_flight"`
	RateLimit      float64           `json:"rate_limit"`
	Retry          retryView         `json:"retry"`
	Disabled       bool              `json:"disabled"`
	DisabledReason string            `json:"disabled_reason"`
	FromConfig     bool              `json:"from_config"`
	CreatedAt      string            `json:"created_at"`
	UpdatedAt      string            `json:"updated_at"`
}

// retryView is a retry policy, durations as strings.
type retryView struct {
	InitialInterval string  `json:"initial_interval"`
	Multiplier      float64 `json:"multiplier"`
	MaxInterval     string  `json:"max_interval"`
	Randomization   float64 `json:"randomization"`
	MaxAttempts     int     `json:"max_attempts"`
	MaxElapsed      string  `json:"max_elapsed"`
}

func newEndpointView(ep *storage.Endpoint) Endpoint {
	v := Endpoint{
		ID: ep.ID, Tenant: ep.Tenant, URL: ep.URL, Sources: orEmpty(ep.Sources), EventTypes: orEmpty(ep.EventTypes),
		Headers: ep.Headers, Timeout: ep.Timeout.String(), MaxInFlight: ep.MaxInFlight, RateLimit: ep.RateLimit,
		Disabled: ep.Disabled, DisabledReason: ep.DisabledReason, FromConfig: ep.FromConfig,
		CreatedAt: apiTime(ep.CreatedAt), UpdatedAt: apiTime(ep.UpdatedAt),
		Retry: retryView{
			InitialInterval: ep.Retry.InitialInterval.String(), Multiplier: ep.Retry.Multiplier,
			MaxInterval: ep.Retry.MaxInterval.String(), Randomization: ep.Retry.Randomization,
			MaxAttempts: ep.Retry.MaxAttempts, MaxElapsed: ep.Retry.MaxElapsed.String(),
		},
	}
	if len(ep.Secrets) > 0 {
		v.Secret = ep.Secrets[0].Value
	}
	if v.Headers == nil {
		v.Headers = map[string]string{}
	}
	return v
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// endpointBody is the body of POST and PATCH /endpoints: every field is
// optional in a PATCH (absent = unchanged), and so are all but url in a
// POST (absent = default).
type endpointBody struct {
	ID          *string            `json:"id"`
	Tenant      *string            `json:"tenant"`
	URL         *string            `json:"url"`
	Secret      *string            `json:"secret"`
	Sources     *[]string          `json:"sources"`
	EventTypes  *[]string          `json:"event_types"`
	Headers     *map[string]string `json:"headers"`
	Timeout     *string            `json:"timeout"`
	MaxInFlight *int               `json:"max_in_flight"`
	RateLimit   *float64           `json:"rate_limit"`
	Retry       *retryBody         `json:"retry"`
	Disabled    *bool              `json:"disabled"`
}

// retryBody overrides fields of a retry policy.
type retryBody struct {
	InitialInterval *string  `json:"initial_interval"`
	Multiplier      *float64 `json:"multiplier"`
	MaxInterval     *string  `json:"max_interval"`
	Randomization   *float64 `json:"randomization"`
	MaxAttempts     *int     `json:"max_attempts"`
	MaxElapsed      *string  `json:"max_elapsed"`
}

// listEndpoints is GET /endpoints, ordered by id.
func (a *API) listEndpoints(c *fiber.Ctx) error {
	p, err := parsePage(c)
	if err != nil {
		return err
	}
	eps, err := a.d.Store.ListEndpoints(c.UserContext())
	if err != nil {
		return a.storeError(err, "endpoint")
	}
	eps = slices.DeleteFunc(eps, func(ep storage.Endpoint) bool { return !who(c).sees(ep.Tenant) })
	out, err := pageByID(eps, "endpoint", func(ep *storage.Endpoint) string { return ep.ID }, p)
	if err != nil {
		return err
	}
	views := List[Endpoint]{Data: make([]Endpoint, len(out.Data)), NextCursor: out.NextCursor}
	for i := range out.Data {
		views.Data[i] = newEndpointView(&out.Data[i])
	}
	return c.JSON(views)
}

// getEndpoint is GET /endpoints/{id}.
func (a *API) getEndpoint(c *fiber.Ctx) error {
	ep, err := a.visibleEndpoint(c)
	if err != nil {
		return err
	}
	return c.JSON(newEndpointView(&ep))
}

func (a *API) visibleEndpoint(c *fiber.Ctx) (storage.Endpoint, error) {
	ep, err := a.d.Store.GetEndpoint(c.UserContext(), c.Params("id"))
	if err != nil {
		return ep, a.storeError(err, "endpoint")
	}
	if !who(c).sees(ep.Tenant) {
		return ep, notFound("endpoint")
	}
	return ep, nil
}

// createEndpoint is POST /endpoints: 201 with the endpoint. The id is
// generated (ep_…) when absent, and so is the secret; timeout and retry
// default to the config's delivery settings.
func (a *API) createEndpoint(c *fiber.Ctx) (err error) {
	var in endpointBody
	if err := decodeJSON(c, &in, false); err != nil {
		return err
	}
	now := a.now()
	id, derived := newID(c, "ep_", now)
	ep := storage.Endpoint{
		ID: id, Tenant: cmpOrTenant(who(c)), Timeout: a.d.Config.Delivery.Timeout.D(),
		MaxInFlight: config.DefaultMaxInFlight, RateLimit: config.DefaultRateLimit, Retry: a.d.Config.Delivery.Retry.Policy(),
		CreatedBy: createdBy(c), CreatedAt: now, UpdatedAt: now,
	}
	if in.ID != nil {
		ep.ID, derived = *in.ID, false
	}
	defer func() { err = naming(err, "endpoint", ep.ID) }()
	if in.Tenant != nil {
		ep.Tenant = *in.Tenant
	}
	if err := checkTenant(who(c), ep.Tenant); err != nil {
		return err
	}
	// ours reports whether a stored endpoint with the id is the one an
	// earlier run of this request (under its Idempotency-Key) made.
	ours := func(old *storage.Endpoint) bool {
		return old.Tenant == ep.Tenant && (derived || ep.CreatedBy != "" && old.CreatedBy == ep.CreatedBy)
	}
	if ep.CreatedBy != "" {
		// Maybe run again: what the first run made is the answer, whatever
		// has changed since (the checks below are for a new endpoint).
		old, err := a.d.Store.GetEndpoint(c.UserContext(), ep.ID)
		switch {
		case err == nil && ours(&old):
			a.d.Registry.Reload() // unless it is in memory (a write whose outcome was unknown)
			return c.Status(fiber.StatusCreated).JSON(newEndpointView(&old))
		case err != nil && !errors.Is(err, storage.ErrNotFound):
			return a.storeError(err, "endpoint")
		}
	}
	if in.URL == nil {
		return unprocessable("url", "required")
	}
	if ep.ID == config.AlertsEndpointID {
		return unprocessable("id", "is the id of the alerts.url endpoint (config.yaml): choose another")
	}
	if err := in.apply(&ep, now); err != nil {
		return err
	}
	if len(ep.Secrets) == 0 {
		ep.Secrets = []storage.Secret{{Value: outbound.NewSecret()}}
	}
	a.catalogMu.Lock()
	defer a.catalogMu.Unlock()
	if err := a.validateEndpoint(c, &ep, nil); err != nil {
		return err
	}
	if err := a.checkTarget(ep.URL); err != nil {
		return err
	}
	if err := a.checkRetention(&ep); err != nil {
		return err
	}
	if n := len(a.d.Registry.Current().ByTenant[ep.Tenant]); n >= config.MaxEndpointsPerTenant {
		return newAPIError(fiber.StatusConflict, "too-many-endpoints", "tenant",
			fmt.Sprintf("the tenant has %d endpoints, the most it may have; delete one first", n))
	}
	ctx, cancel := writeContext(c)
	defer cancel()
	if a.d.Backlogs.Pending(ep.ID) {
		e := newAPIError(fiber.StatusConflict, "endpoint-being-deleted", "id", "an endpoint with this id was deleted and its deliveries are still being cancelled; retry later")
		e.retryAfter = 5
		return e
	}
	if old, err := a.d.Store.GetEndpoint(ctx, ep.ID); err == nil {
		if ours(&old) {
			// The first run of this key use, still running when this one
			// took the key over after its lease, made it meanwhile.
			a.d.Registry.Reload()
			return c.Status(fiber.StatusCreated).JSON(newEndpointView(&old))
		}
		return newAPIError(fiber.StatusConflict, "already-exists", "id", "an endpoint with this id already exists")
	} else if !errors.Is(err, storage.ErrNotFound) {
		return a.storeError(err, "endpoint")
	}
	if err := a.d.Store.PutEndpoint(ctx, &ep); err != nil {
		return a.catalogError(err, "endpoint")
	}
	a.d.Registry.Reload()
	return c.Status(fiber.StatusCreated).JSON(newEndpointView(&ep))
}

// patchEndpoint is PATCH /endpoints/{id}: the fields present replace the
// stored ones. "disabled": false enables an endpoint again (clearing its
// reason); "secret" replaces the current secret at once (rotate-secret is
// the graceful way).
func (a *API) patchEndpoint(c *fiber.Ctx) (err error) {
	var in endpointBody
	if err := decodeJSON(c, &in, false); err != nil {
		return err
	}
	a.catalogMu.Lock()
	defer a.catalogMu.Unlock()
	ep, err := a.visibleEndpoint(c)
	if err != nil {
		return err
	}
	defer func() { err = naming(err, "endpoint", ep.ID) }()
	switch {
	case in.ID != nil && *in.ID != ep.ID:
		return unprocessable("id", "cannot be changed")
	case in.Tenant != nil && *in.Tenant != ep.Tenant:
		return unprocessable("tenant", "cannot be changed")
	}
	now := a.now()
	change := func(ep *storage.Endpoint) error {
		if err := in.apply(ep, now); err != nil {
			return err
		}
		ep.UpdatedAt = now
		return nil
	}
	oldURL, oldSources := ep.URL, ep.Sources
	if err := change(&ep); err != nil {
		return err
	}
	if err := a.validateEndpoint(c, &ep, oldSources); err != nil {
		return err
	}
	if ep.URL != oldURL { // an endpoint from config with such a URL can still be changed
		if err := a.checkTarget(ep.URL); err != nil {
			return err
		}
	}
	if in.Retry != nil { // a PATCH of other fields stays possible after retention was lowered
		if err := a.checkRetention(&ep); err != nil {
			return err
		}
	}
	return a.updateEndpoint(c, ep.ID, change)
}

// How long a DELETE /endpoints/{id} waits for its backlog to be cancelled
// before it answers and leaves the rest to the background: ~10k
// deliveries a second are cancelled here, so a million take minutes.
const deleteWait = 10 * time.Second

// deleteEndpoint is DELETE /endpoints/{id}: the endpoint goes, and so do
// its pending deliveries (cancelled). Delivered history stays. The answer
// waits for the cancel up to deleteWait; a larger backlog, or one whose
// cancel failed, goes on being cancelled in the background.
func (a *API) deleteEndpoint(c *fiber.Ctx) error {
	done, err := a.removeEndpoint(c)
	if err != nil {
		return err
	}
	t := time.NewTimer(deleteWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-c.UserContext().Done():
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// removeEndpoint deletes the endpoint and marks its backlog to be
// cancelled; done is closed once it is. Creating an endpoint with the same
// id waits for that (backlogs), not the catalog lock: other catalog changes
// go on meanwhile.
func (a *API) removeEndpoint(c *fiber.Ctx) (done <-chan struct{}, err error) {
	a.catalogMu.Lock()
	defer a.catalogMu.Unlock()
	ep, err := a.visibleEndpoint(c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := writeContext(c)
	defer cancel()
	// Exclusive until the registry no longer has it: every write of
	// deliveries from a snapshot that still had it is then done, and no
	// later one can target it, so the cancel misses none.
	err = a.d.Registry.Exclusive(func() error {
		if err := a.d.Store.DeleteEndpoint(ctx, ep.ID); err != nil {
			return a.catalogError(err, "endpoint")
		}
		a.d.Registry.Reload() // the dispatcher stops claiming for it
		return nil
	})
	if err != nil {
		return nil, err
	}
	a.d.Metrics.ForgetEndpoint(ep.ID)
	return a.d.Backlogs.Add(ep.ID), nil
}

// checkRetention refuses a retry window longer than the retention: the
// retention sweep deletes events with their deliveries, still retrying
// or not.
func (a *API) checkRetention(ep *storage.Endpoint) error {
	if r := a.d.Config.Retention.D(); ep.Retry.MaxElapsed > r {
		return unprocessable("retry.max_elapsed", fmt.Sprintf(
			"must not exceed the gateway's retention (%s): the retention sweep deletes events with their deliveries", r))
	}
	return nil
}

// rotateRequest is the optional body of POST /endpoints/{id}/rotate-secret.
type rotateRequest struct {
	// Grace is how long the old secret keeps signing (default 24h).
	Grace *string `json:"grace"`
	// Secret is the new secret; generated when absent.
	Secret *string `json:"secret"`
}

// rotateEndpointSecret is POST /endpoints/{id}/rotate-secret: a new
// current secret; the old one keeps signing (every delivery carries a
// signature per live secret) until the grace period ends.
func (a *API) rotateEndpointSecret(c *fiber.Ctx) error {
	var in rotateRequest
	if err := decodeJSON(c, &in, true); err != nil {
		return err
	}
	grace := defaultRotationGrace
	if in.Grace != nil {
		d, err := time.ParseDuration(*in.Grace)
		if err != nil || d < 0 {
			return unprocessable("grace", `must be a Go duration of 0 or more, e.g. "24h"`)
		}
		grace = d
	}
	secret := outbound.NewSecret()
	if in.Secret != nil {
		if !config.ValidWhsec(*in.Secret, config.MinEndpointSecret) {
			return unprocessable("secret", fmt.Sprintf("must be whsec_ followed by base64 of at least %d bytes; leave it out to have one generated", config.MinEndpointSecret))
		}
		secret = *in.Secret
	}
	a.catalogMu.Lock()
	defer a.catalogMu.Unlock()
	ep, err := a.visibleEndpoint(c)
	if err != nil {
		return err
	}
	now := a.now()
	return a.updateEndpoint(c, ep.ID, func(ep *storage.Endpoint) error {
		ep.Secrets = rotateSecrets(ep.Secrets, secret, now, grace)
		ep.UpdatedAt = now
		return nil
	})
}

// rotateSecrets puts secret first and lets the others sign until
// now+grace at the latest; those already expired are dropped.
func rotateSecrets(old []storage.Secret, secret string, now time.Time, grace time.Duration) []storage.Secret {
	out := []storage.Secret{{Value: secret}}
	until := now.Add(grace)
	for _, s := range old {
		if !outbound.Live(s, now) || s.Value == secret || grace == 0 {
			continue
		}
		if s.ExpiresAt.IsZero() || s.ExpiresAt.After(until) {
			s.ExpiresAt = until
		}
		out = append(out, s)
	}
	return out
}

// updateEndpoint applies change to the endpoint as stored at the time of
// the write, not as it was read: the dispatcher may have disabled it since
// (410 Gone), and that must not be undone by an unrelated change. change
// was already applied to the read copy and validated; on the stored one it
// differs at most in the fields the dispatcher sets.
func (a *API) updateEndpoint(c *fiber.Ctx, id string, change func(*storage.Endpoint) error) error {
	ctx, cancel := writeContext(c)
	defer cancel()
	// An operator's disable or enable is told to the tenant's subscribers
	// (hookgate.endpoint.disabled or .recovered), stored with the change.
	var notice *storage.Notice
	ep, err := a.d.Store.ChangeEndpoint(ctx, id, func(ep *storage.Endpoint) (*storage.Notice, error) {
		was := ep.Disabled
		if err := change(ep); err != nil {
			return nil, err
		}
		notice = nil
		if ep.Disabled != was {
			typ := outbound.NoticeEndpointRecovered
			if ep.Disabled {
				typ = outbound.NoticeEndpointDisabled
			}
			notice = a.d.Dispatcher.EndpointNotice(*ep, typ, outbound.ReasonOperator, a.now())
		}
		return notice, nil
	})
	if err == nil {
		a.d.Dispatcher.NotifyNotice(notice)
	}
	var apiErr *apiError
	if errors.As(err, &apiErr) {
		return err
	}
	if err != nil {
		return a.catalogError(err, "endpoint")
	}
	a.d.Registry.Reload()
	return c.Status(fiber.StatusOK).JSON(newEndpointView(&ep))
}

// apply writes the fields present in b onto ep; it checks what it parses
// (durations), validateEndpoint checks the rest.
func (b *endpointBody) apply(ep *storage.Endpoint, now time.Time) error {
	if b.URL != nil {
		ep.URL = *b.URL
	}
	if b.Secret != nil {
		if !config.ValidWhsec(*b.Secret, config.MinEndpointSecret) {
			return unprocessable("secret", fmt.Sprintf("must be whsec_ followed by base64 of at least %d bytes; leave it out to have one generated", config.MinEndpointSecret))
		}
		if len(ep.Secrets) == 0 || ep.Secrets[0].Value != *b.Secret {
			ep.Secrets = []storage.Secret{{Value: *b.Secret}}
		}
	}
	if b.Sources != nil {
		ep.Sources = *b.Sources
	}
	if b.EventTypes != nil {
		ep.EventTypes = *b.EventTypes
	}
	if b.Headers != nil {
		ep.Headers = *b.Headers
	}
	if b.Timeout != nil {
		d, err := positiveDuration("timeout", *b.Timeout)
		if err != nil {
			return err
		}
		if d > config.MaxTimeout {
			return unprocessable("timeout", "must be at most "+config.MaxTimeout.String())
		}
		ep.Timeout = d
	}
	if b.MaxInFlight != nil {
		// Bounded where it is set: a PATCH of other fields of an endpoint
		// stored before the bound stays possible (it is capped when sent).
		if *b.MaxInFlight > outbound.MaxMaxInFlight {
			return maxInFlightProblem()
		}
		ep.MaxInFlight = *b.MaxInFlight
	}
	if b.RateLimit != nil {
		ep.RateLimit = *b.RateLimit
	}
	if b.Retry != nil {
		if err := b.Retry.apply(&ep.Retry); err != nil {
			return err
		}
	}
	if b.Disabled != nil && *b.Disabled != ep.Disabled {
		ep.Disabled, ep.DisabledReason = *b.Disabled, ""
		if ep.Disabled {
			ep.DisabledReason = "disabled through the admin API at " + apiTime(now)
		}
	}
	return nil
}

func (r *retryBody) apply(p *storage.RetryPolicy) error {
	for _, f := range []struct {
		name string
		s    *string
		d    *time.Duration
	}{
		{"retry.initial_interval", r.InitialInterval, &p.InitialInterval},
		{"retry.max_interval", r.MaxInterval, &p.MaxInterval},
		{"retry.max_elapsed", r.MaxElapsed, &p.MaxElapsed},
	} {
		if f.s == nil {
			continue
		}
		d, err := positiveDuration(f.name, *f.s)
		if err != nil {
			return err
		}
		*f.d = d
	}
	if r.Multiplier != nil {
		p.Multiplier = *r.Multiplier
	}
	if r.Randomization != nil {
		p.Randomization = *r.Randomization
	}
	if r.MaxAttempts != nil {
		p.MaxAttempts = *r.MaxAttempts
	}
	return nil
}

func maxInFlightProblem() error {
	return unprocessable("max_in_flight", fmt.Sprintf("must be from 1 to %d", outbound.MaxMaxInFlight))
}

func positiveDuration(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, unprocessable(field, `must be a Go duration greater than 0, e.g. "15s"`)
	}
	return d, nil
}

// validateEndpoint applies config.yaml's rules to an endpoint (SPEC
// section 2); the first problem is the answer. Its sources must exist in
// its tenant, but for those in kept: a PATCH must not be refused because a
// source the stored filter names was deleted since.
func (a *API) validateEndpoint(c *fiber.Ctx, ep *storage.Endpoint, kept []string) error {
	if err := checkID(ep.ID); err != nil {
		return err
	}
	if err := checkURL(ep.URL); err != nil {
		return err
	}
	for i, id := range ep.Sources {
		if slices.Contains(kept, id) {
			continue
		}
		src, err := a.d.Store.GetSource(c.UserContext(), id)
		if errors.Is(err, storage.ErrNotFound) || (err == nil && src.Tenant != ep.Tenant) {
			return unprocessable(fmt.Sprintf("sources[%d]", i), "no source "+quoteID(id)+"in the endpoint's tenant")
		} else if err != nil {
			return a.storeError(err, "source")
		}
	}
	if i, p := config.EventTypesProblem(ep.EventTypes); p != "" {
		return unprocessable(config.IndexedField("event_types", i), p)
	}
	for i, g := range ep.EventTypes {
		if storage.ValidTypeGlob(g) != nil {
			return unprocessable(fmt.Sprintf("event_types[%d]", i), "must be a non-empty glob (\"*\", \"?\", \"[...]\"), e.g. \"invoice.*\"")
		}
	}
	if err := checkHeaders(ep.Headers); err != nil {
		return err
	}
	switch {
	case ep.MaxInFlight < 1:
		return maxInFlightProblem()
	case ep.RateLimit < 0:
		return unprocessable("rate_limit", "must be 0 (unlimited) or more")
	}
	return checkRetry(ep.Retry)
}
