package inbound

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"hookgate/storage"
)

// DefaultDedupeTTL is how long an inbound event ID is remembered when the
// config says nothing.
const DefaultDedupeTTL = 72 * time.Hour

// MaxEventIDLen bounds a provider event ID (and type) taken from a request.
const MaxEventIDLen = 512

// ErrEventIDTooLong is returned when a request's event ID or type is longer
// than MaxEventIDLen.
var ErrEventIDTooLong = errors.New("event id or type too long")

// Source is a source ready for requests: its verifier and expressions are
// built once, not per request.
type Source struct {
	storage.Source
	verifier Verifier
	idExpr   Expr
	typeExpr Expr
}

// CompileSource builds the verifier and expressions of a stored source.
// The per-scheme default expressions apply where the source sets none.
func CompileSource(src storage.Source) (*Source, error) {
	v, err := NewVerifier(VerifyConfig{
		Scheme: src.Verify.Scheme, Secrets: src.Verify.Secrets, Tolerance: src.Verify.Tolerance,
		Header: src.Verify.Header, Algorithm: src.Verify.Algorithm, Encoding: src.Verify.Encoding,
		Prefix: src.Verify.Prefix,
	})
	if err != nil {
		return nil, fmt.Errorf("source %s: verify: %w", src.ID, err)
	}
	s := &Source{Source: src, verifier: v}
	if s.idExpr, err = ParseExpr(cmp.Or(src.EventID, DefaultEventIDExpr(src.Verify.Scheme))); err != nil {
		return nil, fmt.Errorf("source %s: event_id: %w", src.ID, err)
	}
	if s.typeExpr, err = ParseExpr(cmp.Or(src.EventType, DefaultEventTypeExpr(src.Verify.Scheme))); err != nil {
		return nil, fmt.Errorf("source %s: event_type: %w", src.ID, err)
	}
	return s, nil
}

// Inbound is one ingest request as the HTTP layer hands it over.
type Inbound struct {
	Header HeaderGetter
	Query  func(name string) string
	// Body is the raw body; it is copied before it is kept.
	Body        []byte
	ContentType string
	// Headers are the request headers to store with the event.
	Headers map[string]string
	// EventID, when set, is the provider event ID (admin publish); the
	// source's expression is not evaluated.
	EventID string
	// Type, when set, is the event type (admin publish).
	Type string
	// SkipVerify is true for requests already authenticated another way
	// (the admin API's publish).
	SkipVerify bool
}

// Received is the answer to an ingest request.
type Received struct {
	// Status and Body are the answer, byte-identical for every retry.
	Status int
	Body   []byte
	// Replayed is true when the event was known: nothing new was stored.
	Replayed bool
	// Handshake is true for a sender's check of the URL, answered as it
	// asks (Slack's url_verification): nothing was stored.
	Handshake bool
	// Event is the stored event (zero when Replayed).
	Event storage.Event
	// Deliveries are the new deliveries (none when Replayed).
	Deliveries []storage.Delivery
}

// Claimed returns the new deliveries written claimed (reserved slots),
// ready to be sent, with the event they carry.
func (a Received) Claimed() []storage.Job {
	var jobs []storage.Job
	for _, d := range a.Deliveries {
		if d.State == storage.StateDelivering {
			jobs = append(jobs, storage.Job{Delivery: d, Event: a.Event})
		}
	}
	return jobs
}

// Pending returns the endpoints of the new deliveries written pending.
func (a Received) Pending() []string {
	var ids []string
	for _, d := range a.Deliveries {
		if d.State == storage.StatePending {
			ids = append(ids, d.Endpoint)
		}
	}
	return ids
}

// HandOff is the dispatcher as a Receiver meets it. Before the write,
// each new delivery asks its endpoint for a free slot (Reserve: a non-zero
// lease per endpoint that has one); a delivery granted one is written
// already claimed under that lease and, once the write is durable, handed
// over with its event (Hand) to be sent at once. When nothing was written,
// the slots go back (Unreserve).
type HandOff interface {
	Reserve(endpoints []string, now time.Time) []time.Time
	Unreserve(endpoints []string)
	Hand(jobs []storage.Job)
}

// Receiver turns verified requests into durable events and deliveries.
type Receiver struct {
	// Store persists events; its Ingest is durable when it returns.
	Store storage.Ingester
	// DedupeTTL is how long an event ID is remembered (default 72h).
	DedupeTTL time.Duration
	// Now is the clock (tests); nil = time.Now.
	Now func() time.Time
	// HandOff, when set, takes new deliveries straight to a free slot of
	// their endpoint; nil leaves every new delivery in the outbox (a
	// store that several gateways share: a slot of one gateway's is not
	// a slot of the endpoint's).
	HandOff HandOff
}

// Receive verifies, identifies and stores one request for src, with one
// delivery per endpoint in endpoints that subscribes to it. Errors:
// the verify sentinels (ErrBadSignature, ...), ErrEventIDTooLong,
// storage.ErrIdempotencyMismatch, or a store error (nothing acknowledged).
func (a *Receiver) Receive(ctx context.Context, src *Source, endpoints []storage.Endpoint, in Inbound) (Received, error) {
	now := time.Now()
	if a.Now != nil {
		now = a.Now()
	}
	now = now.UTC()
	if !in.SkipVerify {
		if err := src.verifier.Verify(in.Header, in.Body, now); err != nil {
			return Received{}, err
		}
		if src.Verify.Scheme == SchemeSlack {
			if answer, ok := slackChallenge(in.Body); ok {
				return Received{Status: 200, Body: answer, Handshake: true}, nil
			}
		}
	}
	eventID, typ := in.EventID, in.Type
	if eventID == "" || typ == "" {
		r := &Request{Header: in.Header, Query: in.Query, Body: in.Body}
		if eventID == "" {
			eventID = EventID(src.idExpr, r)
		}
		if typ == "" {
			typ, _ = src.typeExpr.Eval(r)
		}
	}
	if len(eventID) > MaxEventIDLen || len(typ) > MaxEventIDLen {
		return Received{}, ErrEventIDTooLong
	}
	// Header values may alias the HTTP server's buffers (Fiber reuses them
	// after the handler returns), and the event outlives the request.
	eventID, typ = strings.Clone(eventID), strings.Clone(typ)
	ev := storage.Event{
		ID: storage.NewID("evt_", now), Tenant: src.Tenant, Source: src.ID, EventID: eventID, Type: typ,
		ReceivedAt: now, ContentType: in.ContentType, Headers: in.Headers, Body: slices.Clone(in.Body),
		IdempotencyKey: storage.IdempotencyKey(src.Tenant, src.ID, eventID),
	}
	req := &storage.IngestRequest{
		Key:         storage.DedupeKey{Tenant: src.Tenant, Source: src.ID, EventID: eventID},
		BodyHash:    sha256.Sum256(in.Body),
		DedupeUntil: now.Add(cmp.Or(a.DedupeTTL, DefaultDedupeTTL)),
		Event:       ev,
		Deliveries:  storage.NewDeliveries(&ev, Subscribers(endpoints, src.Tenant, src.ID, typ), now),
		Response:    storage.Response{Status: 202, Body: acceptedBody(ev.ID, eventID)},
	}
	reserved := a.reserve(req.Deliveries, now)
	defer func() {
		// A panic in the store (the gateway answers it 500 and goes on)
		// must not keep the slots: nothing will hand these deliveries.
		if p := recover(); p != nil {
			if len(reserved) > 0 {
				a.HandOff.Unreserve(reserved)
				a.releaseClaimed(ctx, req.Deliveries, now)
			}
			panic(p)
		}
	}()
	res, err := a.Store.Ingest(ctx, req)
	if err != nil || res.Replayed {
		if len(reserved) > 0 {
			a.HandOff.Unreserve(reserved)
		}
		if err != nil {
			if len(reserved) > 0 && !errors.Is(err, storage.ErrIdempotencyMismatch) {
				a.releaseClaimed(ctx, req.Deliveries, now)
			}
			return Received{}, err
		}
		return Received{Status: res.Response.Status, Body: res.Response.Body, Replayed: true}, nil
	}
	out := Received{Status: res.Response.Status, Body: res.Response.Body, Event: ev, Deliveries: req.Deliveries}
	if jobs := out.Claimed(); len(jobs) > 0 {
		a.HandOff.Hand(jobs)
	}
	return out, nil
}

// releaseClaimed makes deliveries that a failed Ingest may still have
// written claimed (the write can fail after its commit, e.g. in the sync)
// due now instead of after their lease: their slots were given back, so
// nobody would send them before it expired. Best effort: where nothing was
// written there is nothing to release, and where the store stays broken
// the lease still brings them back.
func (a *Receiver) releaseClaimed(ctx context.Context, ds []storage.Delivery, now time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, g := range storage.LeaseGroups(ds) {
		_ = a.Store.Release(ctx, g.IDs, g.Lease, now)
	}
}

// reserve asks for a slot per delivery and marks the granted ones claimed.
// It returns the endpoints that granted one.
func (a *Receiver) reserve(ds []storage.Delivery, now time.Time) []string {
	if a.HandOff == nil || len(ds) == 0 {
		return nil
	}
	ids := make([]string, len(ds))
	for i := range ds {
		ids[i] = ds[i].Endpoint
	}
	leases := a.HandOff.Reserve(ids, now)
	var reserved []string
	for i := range ds {
		if i < len(leases) && !leases[i].IsZero() {
			ds[i].State = storage.StateDelivering
			ds[i].LeaseUntil = leases[i]
			reserved = append(reserved, ds[i].Endpoint)
		}
	}
	return reserved
}

// acceptedBody is the 202 answer: {"id":"evt_…","event_id":"…"}.
func acceptedBody(id, eventID string) []byte {
	b := make([]byte, 0, 32+len(id)+len(eventID))
	b = append(b, `{"id":`...)
	b = strconv.AppendQuote(b, id)
	b = append(b, `,"event_id":`...)
	b = appendJSONString(b, eventID)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string, as encoding/json would:
// quotes, backslashes and control bytes escaped, invalid UTF-8 replaced by
// U+FFFD (strconv's quoting is Go syntax, not JSON).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+n]...)
			}
			i += n
			continue
		}
		i++
	}
	return append(b, '"')
}

// HeaderReplayed marks an answer (of ingest, or of an admin POST) that was
// stored earlier and is sent again.
const HeaderReplayed = "Idempotent-Replayed"

// Subscribers returns the enabled endpoints of tenant that want events of
// source with type typ: an empty sources list means every source of the
// tenant, an empty event_types list every type, otherwise any glob matches.
func Subscribers(endpoints []storage.Endpoint, tenant, source, typ string) []storage.Endpoint {
	var out []storage.Endpoint
	for _, ep := range endpoints {
		if ep.Tenant == tenant && !ep.Disabled && Subscribes(&ep, source, typ) {
			out = append(out, ep)
		}
	}
	return out
}

// Subscribes reports whether ep's filters let an event of (source, typ)
// through; tenant and disabled are the caller's business.
// An operational event (source storage.NoticeSource, replayed) goes
// only to an endpoint that asks for it by name (storage.WantsNotice),
// and a glob that does so takes no other event.
func Subscribes(ep *storage.Endpoint, source, typ string) bool {
	if source == storage.NoticeSource {
		return storage.WantsNotice(ep.EventTypes, typ)
	}
	if len(ep.Sources) > 0 && !slices.Contains(ep.Sources, source) {
		return false
	}
	if len(ep.EventTypes) == 0 {
		return true
	}
	for _, g := range ep.EventTypes {
		if !strings.HasPrefix(g, storage.NoticeTypePrefix) && storage.MatchType(g, typ) {
			return true
		}
	}
	return false
}
