package outbound

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"hookgate/storage"
)

// Operational event types: what hookgate itself records in a tenant's
// event stream (Source "hookgate", storage.NoticeSource) when a delivery
// fails for good, when an endpoint is disabled and when it recovers. Each
// is stored in the same write as the change it reports.
const (
	NoticeDeliveryFailed    = "hookgate.delivery.failed"
	NoticeEndpointDisabled  = "hookgate.endpoint.disabled"
	NoticeEndpointRecovered = "hookgate.endpoint.recovered"
)

// Reasons of NoticePayload.Reason: a small closed set.
const (
	// ReasonAttemptsExhausted: the delivery's last attempt reached its
	// endpoint's retry.max_attempts.
	ReasonAttemptsExhausted = "attempts_exhausted"
	// ReasonMaxElapsed: the next attempt would start after retry.max_elapsed.
	ReasonMaxElapsed = "max_elapsed"
	// ReasonGone: the endpoint answered 410 Gone: the delivery failed and
	// the endpoint was disabled.
	ReasonGone = "gone"
	// ReasonExpired: max_elapsed passed, unsent, while the endpoint was
	// paused (circuit open, Retry-After).
	ReasonExpired = "expired"
	// ReasonCircuit: the endpoint's circuit breaker opened after
	// consecutive failures (disabled until NoticePayload.Until, then
	// probed), or closed again after a probe succeeded (recovered).
	ReasonCircuit = "circuit"
	// ReasonOperator: an operator disabled or enabled the endpoint.
	ReasonOperator = "operator"
)

// NoticePayload is the JSON body of an operational event. Empty fields
// are left out. Times are RFC 3339 in UTC, with the fraction of a second
// to the nanosecond and its trailing zeros trimmed, as the admin API's.
//
// hookgate.delivery.failed: type, tenant, endpoint (the delivery's),
// delivery, event (hookgate's event id), event_type, source, reason
// (attempts_exhausted, max_elapsed, gone, expired), attempts, last_status,
// last_error, created_at (the delivery's), failed_at.
//
// hookgate.endpoint.disabled: type, tenant, endpoint, reason (gone: it
// answered 410 and is disabled until an operator enables it; circuit:
// paused after consecutive_failures failed attempts until until, then
// probed; operator), last_status, last_error, consecutive_failures,
// disabled_at, until.
//
// hookgate.endpoint.recovered: type, tenant, endpoint, reason (circuit: a
// probe succeeded after the circuit opened; operator), recovered_at.
//
// A notice goes to the endpoints of its tenant that ask for it by name
// (an event_types glob starting with "hookgate.", so "*" alone does not:
// no surprise traffic; sources do not apply), except the endpoint it is
// about and disabled ones, and to Config.AlertEndpoint. A failed delivery
// of an operational event raises none, nor does the alert endpoint.
type NoticePayload struct {
	Type                string `json:"type"`
	Tenant              string `json:"tenant,omitempty"`
	Endpoint            string `json:"endpoint,omitempty"`
	Delivery            string `json:"delivery,omitempty"`
	Event               string `json:"event,omitempty"`
	EventType           string `json:"event_type,omitempty"`
	Source              string `json:"source,omitempty"`
	Reason              string `json:"reason,omitempty"`
	Attempts            int    `json:"attempts,omitempty"`
	LastStatus          int    `json:"last_status,omitempty"`
	LastError           string `json:"last_error,omitempty"`
	ConsecutiveFailures int    `json:"consecutive_failures,omitempty"`
	CreatedAt           string `json:"created_at,omitempty"`
	FailedAt            string `json:"failed_at,omitempty"`
	DisabledAt          string `json:"disabled_at,omitempty"`
	Until               string `json:"until,omitempty"`
	RecoveredAt         string `json:"recovered_at,omitempty"`
}

// noticeTime formats a payload time; "" for zero.
func noticeTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// noticeAll keys the alert endpoint in Dispatcher.subs: not a tenant
// (a tenant is never empty).
const noticeAll = ""

// subscribers returns the loops of the endpoints that may receive
// tenant's notices: its endpoints with a glob of operational event types,
// and the alert endpoint. The caller holds d.mu (read).
func (d *Dispatcher) subscribers(tenant string) (own []*endpointLoop, alert *endpointLoop) {
	d.subsMu.Lock()
	defer d.subsMu.Unlock()
	if d.subs == nil {
		d.subs = map[string][]*endpointLoop{}
		for id, l := range d.endpoints {
			l.mu.Lock()
			ep := l.ep
			l.mu.Unlock()
			switch {
			case id == d.cfg.AlertEndpoint:
				d.subs[noticeAll] = append(d.subs[noticeAll], l)
			case slices.ContainsFunc(ep.EventTypes, func(g string) bool { return strings.HasPrefix(g, storage.NoticeTypePrefix) }):
				d.subs[ep.Tenant] = append(d.subs[ep.Tenant], l)
			}
		}
	}
	if a := d.subs[noticeAll]; len(a) > 0 {
		alert = a[0]
	}
	return d.subs[tenant], alert
}

// forgetSubscribers drops Dispatcher.subs: an endpoint changed. The
// caller holds d.mu (write).
func (d *Dispatcher) forgetSubscribers() {
	d.subsMu.Lock()
	d.subs = nil
	d.subsMu.Unlock()
}

// recipients are the endpoints a notice of type typ about endpoint about
// goes to: its tenant's subscribed ones and the alert endpoint, each
// once, none disabled, never about itself.
func (d *Dispatcher) recipients(about *storage.Endpoint, typ string) []storage.Endpoint {
	d.mu.RLock()
	defer d.mu.RUnlock()
	own, alert := d.subscribers(about.Tenant)
	var out []storage.Endpoint
	for _, l := range own {
		l.mu.Lock()
		ep := l.ep
		l.mu.Unlock()
		if ep.ID != about.ID && !ep.Disabled && storage.WantsNotice(ep.EventTypes, typ) {
			out = append(out, ep)
		}
	}
	if alert != nil {
		alert.mu.Lock()
		ep := alert.ep
		alert.mu.Unlock()
		// The alert endpoint is the operator's (tenant ""): one of a tenant
		// gets that tenant's notices only.
		if ep.ID != about.ID && !ep.Disabled && (ep.Tenant == "" || ep.Tenant == about.Tenant) {
			out = append(out, ep)
		}
	}
	slices.SortFunc(out, func(a, b storage.Endpoint) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// noticeAbout builds the operational event p about endpoint about, at
// now, with a delivery to each recipient; nil when none is raised about
// it (the alert endpoint).
func (d *Dispatcher) noticeAbout(about *storage.Endpoint, p NoticePayload, now time.Time) *storage.Notice {
	if about.ID == d.cfg.AlertEndpoint && d.cfg.AlertEndpoint != "" {
		return nil
	}
	p.Tenant, p.Endpoint = about.Tenant, about.ID
	body, err := json.Marshal(&p)
	if err != nil {
		d.log.Error("encode an operational event", "type", p.Type, "err", err)
		return nil
	}
	now = now.UTC()
	id := storage.NewID("evt_", now)
	ev := storage.Event{
		ID: id, Tenant: about.Tenant, Source: storage.NoticeSource, EventID: id, Type: p.Type,
		ReceivedAt: now, ContentType: "application/json", Body: body,
		IdempotencyKey: storage.IdempotencyKey(about.Tenant, storage.NoticeSource, id),
	}
	return &storage.Notice{Event: ev, Deliveries: storage.NewDeliveries(&ev, d.recipients(about, p.Type), now)}
}

// EndpointNotice is the operational event an operator's change of an
// endpoint raises: typ NoticeEndpointDisabled or NoticeEndpointRecovered,
// with reason (ReasonOperator), about ep, at now. The admin API stores it
// with the change (storage.Catalog.ChangeEndpoint) and then calls
// NotifyNotice. It returns nil when no notice is raised about ep (it is
// the alert endpoint); otherwise the event, with no deliveries when no
// endpoint subscribes (it is stored all the same, in ep's tenant's
// stream).
func (d *Dispatcher) EndpointNotice(ep storage.Endpoint, typ, reason string, now time.Time) *storage.Notice {
	p := NoticePayload{Type: typ, Reason: reason}
	switch typ {
	case NoticeEndpointDisabled:
		p.DisabledAt = noticeTime(now)
	case NoticeEndpointRecovered:
		p.RecoveredAt = noticeTime(now)
	}
	return d.noticeAbout(&ep, p, now)
}

// NotifyNotice wakes the loops of the recipients of stored notices, so
// that they are sent at once, and hands them to Config.OnNotice.
func (d *Dispatcher) NotifyNotice(ns ...*storage.Notice) {
	var ids []string
	for _, n := range ns {
		if n == nil {
			continue
		}
		for _, dl := range n.Deliveries {
			ids = append(ids, dl.Endpoint)
		}
	}
	if len(ids) > 0 {
		d.Notify(ids...)
		if d.cfg.OnNotice != nil {
			d.cfg.OnNotice(ids)
		}
	}
}

// failedReason is the NoticePayload.Reason of a delivery that failed with
// decision dec.
func failedReason(dec Decision) string {
	switch {
	case dec.Verdict == VerdictDisable:
		return ReasonGone
	case dec.Failure != "":
		return dec.Failure
	}
	return ReasonAttemptsExhausted
}

// deliveryFailed is the notice of job's delivery failed for good at now
// (reason), after its last attempt att; nil when none is raised (an
// operational event's delivery, or the alert endpoint's).
func (d *Dispatcher) deliveryFailed(ep *storage.Endpoint, job *storage.Job, att storage.Attempt, counted bool, reason string, now time.Time) *storage.Notice {
	if job.Event.Source == storage.NoticeSource {
		return nil // no loops: an operational event's failure is not one
	}
	attempts := job.Delivery.AttemptCount
	if counted {
		attempts++
	}
	return d.noticeAbout(ep, NoticePayload{
		Type: NoticeDeliveryFailed, Delivery: job.Delivery.ID, Event: job.Event.ID,
		EventType: job.Event.Type, Source: job.Event.Source, Reason: reason, Attempts: attempts,
		LastStatus: att.StatusCode, LastError: att.Error,
		CreatedAt: noticeTime(job.Delivery.CreatedAt), FailedAt: noticeTime(now),
	}, now)
}

// circuitOpened is the notice of ep's circuit opened at now, after
// failures consecutive failures, paused until until, by the attempt att.
func (d *Dispatcher) circuitOpened(ep *storage.Endpoint, att storage.Attempt, failures int, until, now time.Time) *storage.Notice {
	return d.noticeAbout(ep, NoticePayload{
		Type: NoticeEndpointDisabled, Reason: ReasonCircuit, LastStatus: att.StatusCode, LastError: att.Error,
		ConsecutiveFailures: failures, DisabledAt: noticeTime(now), Until: noticeTime(until),
	}, now)
}

// circuitClosed is the notice of ep's circuit closed at now.
func (d *Dispatcher) circuitClosed(ep *storage.Endpoint, now time.Time) *storage.Notice {
	return d.noticeAbout(ep, NoticePayload{Type: NoticeEndpointRecovered, Reason: ReasonCircuit, RecoveredAt: noticeTime(now)}, now)
}
