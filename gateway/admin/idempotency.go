package admin

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/gofiber/fiber/v2"

	"hookgate/inbound"
	"hookgate/storage"
)

// Admin Idempotency-Key handling (SPEC section 5).
const (
	// headerIdempotencyKey is the request header naming a POST's key.
	headerIdempotencyKey = "Idempotency-Key"
	// idemLease is how long a claimed key stays "in progress": longer than
	// any admin request, and the longest a retry waits after a crash.
	idemLease = 30 * time.Second
	// maxIdemKeyLen bounds a key (Stripe's limit).
	maxIdemKeyLen = 255
)

// idempotent, in front of each POST route's handler, runs a POST that
// carries an Idempotency-Key at most once per (tenant, key): the first
// request is executed and its answer stored for dedupe.ttl; the same
// request again gets that answer with Idempotent-Replayed; another request
// with the key is 422; the same key while the first still runs is 409 with
// Retry-After. A 5xx answer, or any with Retry-After, is not stored, so a
// retry executes again; a process that dies mid-request leaves a claim
// that expires after idemLease.
func (a *API) idempotent(c *fiber.Ctx) error {
	keys := c.Request().Header.PeekAll(headerIdempotencyKey)
	if len(keys) == 0 {
		return c.Next()
	}
	// A key that is sent but empty (or only blanks, which HTTP trims) must
	// not quietly turn into "no key": the client asked for idempotency.
	if len(keys) > 1 {
		return badRequest(headerIdempotencyKey, "must be sent once")
	}
	key := string(keys[0]) // a copy: the header aliases a reused buffer
	if key == "" || len(key) > maxIdemKeyLen || !printableASCII(key) {
		return badRequest(headerIdempotencyKey, "must be 1-255 printable ASCII characters")
	}
	tenant := who(c).tenant
	now := a.now()
	rh := RequestHash(c.Method(), c.Path(), c.Request().Body())
	res, err := a.d.Store.ClaimKey(c.UserContext(), storage.IdemClaim{
		Tenant: tenant, Key: key, RequestHash: rh, Now: now, LeaseUntil: now.Add(idemLease),
		Remember: now.Add(a.d.Config.Dedupe.TTL.D()),
	})
	if err != nil {
		return a.storeError(err, "idempotency key")
	}
	switch res.State {
	case storage.IdemReplay:
		c.Set(inbound.HeaderReplayed, "true")
		return sendStored(c, res.Response)
	case storage.IdemMismatch:
		return newAPIError(fiber.StatusUnprocessableEntity, "idempotency-key-reused", headerIdempotencyKey,
			"this Idempotency-Key was already used for a different request")
	case storage.IdemInProgress:
		e := newAPIError(fiber.StatusConflict, "idempotency-key-in-progress", headerIdempotencyKey,
			"a request with this Idempotency-Key is still running; retry later")
		e.retryAfter = int(max(1, math.Ceil(res.LeaseUntil.Sub(now).Seconds())))
		return e
	}
	c.Locals(localIdemUse, idemUse{
		seed:  []string{tenant, key, string(rh[:]), res.Since.UTC().Format(time.RFC3339Nano)},
		since: res.Since,
		again: res.Since.Before(now),
	})
	return a.runClaimed(c, tenant, key, res.LeaseUntil)
}

// localIdemUse holds, for a request run under an Idempotency-Key, its
// idemUse.
const localIdemUse = "hookgate.idem-use"

// idemUse is one use of an Idempotency-Key, for the handler it runs: a
// request whose answer was never stored (the process died between its
// write and its answer's, or a store error made the write's outcome
// unknown) is run again, and must find what its first run did instead of
// doing it a second time.
type idemUse struct {
	seed  []string  // what ids made by the use are derived from
	since time.Time // when the use began (IdemResult.Since)
	again bool      // an earlier run of the use may have written
}

// usedKey returns the request's Idempotency-Key use, if it has one.
func usedKey(c *fiber.Ctx) (idemUse, bool) {
	u, ok := c.Locals(localIdemUse).(idemUse)
	return u, ok
}

// createdBy is what a create under an Idempotency-Key stores as
// CreatedBy (Endpoint, Source), "" without a key: a run again finds by it
// the resource its first run made under an id the request named.
func createdBy(c *fiber.Ctx) string {
	if u, ok := usedKey(c); ok {
		return storage.DerivedID("idem_", u.seed...)
	}
	return ""
}

// newID names what a POST creates (an endpoint, a replay job). Under an
// Idempotency-Key the id is derived from the key's use (idemUse), and
// derived is true: the request run again finds what its first run made
// instead of making a second endpoint or replay job beside it. A key used
// again after dedupe.ttl is a new use: a new id.
func newID(c *fiber.Ctx, prefix string, now time.Time) (id string, derived bool) {
	if u, ok := usedKey(c); ok {
		return storage.DerivedID(prefix, u.seed...), true
	}
	return storage.NewID(prefix, now), false
}

// runClaimed executes a request whose key this process holds, then stores
// its answer (or drops the claim after a 5xx or a Retry-After, so that a
// retry runs again).
func (a *API) runClaimed(c *fiber.Ctx, tenant, key string, lease time.Time) error {
	// The key's own writes get their time once the handler is done: a
	// handler may run longer than that (its writes queue behind others),
	// and its answer must still be stored.
	writeContext := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(c.UserContext()), 10*time.Second)
	}
	defer func() {
		// A handler that panics answers 500 (recoverPanics, further out):
		// drop the claim as after any 5xx, or the retry the 500 invites
		// would get 409 for the rest of the lease.
		if r := recover(); r != nil {
			ctx, cancel := writeContext()
			a.abandonKey(ctx, tenant, key, lease)
			cancel()
			panic(r)
		}
	}()
	err := c.Next()
	if err != nil {
		if werr := ErrorHandler(c, err); werr != nil {
			return werr
		}
	}
	ctx, cancel := writeContext()
	defer cancel()
	status := c.Response().StatusCode()
	// An answer that says "retry later" (a 5xx, or a 409 with Retry-After:
	// the delivery is in flight, the endpoint id is being deleted) is not
	// the request's outcome: stored, it would answer the retry it asks for.
	if status >= fiber.StatusInternalServerError || len(c.Response().Header.Peek(fiber.HeaderRetryAfter)) > 0 {
		a.abandonKey(ctx, tenant, key, lease)
		return nil
	}
	resp := storage.Response{Status: status, Body: slices.Clone(c.Response().Body())}
	err = a.d.Store.FinishKey(ctx, tenant, key, lease, resp, a.now().Add(a.d.Config.Dedupe.TTL.D()))
	switch {
	case errors.Is(err, storage.ErrLeaseLost):
		// It ran past its lease and another request holds the key now:
		// that one's answer is the one to keep.
		a.d.Log.Warn("admin api: request outlived its idempotency lease; its answer is not stored", "key_tenant", tenant)
	case err != nil:
		// The request had its effect; its claim expires after the lease.
		a.d.Log.Error("admin api: store idempotent answer", "err", err)
	}
	return nil
}

// abandonKey ends this process's claim of a key, so that a retry runs the
// request again. A claim already lost to another request is that
// request's to end.
func (a *API) abandonKey(ctx context.Context, tenant, key string, lease time.Time) {
	if err := a.d.Store.AbandonKey(ctx, tenant, key, lease); err != nil && !errors.Is(err, storage.ErrLeaseLost) {
		a.d.Log.Warn("admin api: abandon idempotency claim", "err", err)
	}
}

// sendStored replays a stored answer byte for byte.
func sendStored(c *fiber.Ctx, r storage.Response) error {
	switch {
	case len(r.Body) == 0:
	case r.Status >= 400:
		c.Set(fiber.HeaderContentType, "application/problem+json")
	default:
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	}
	return c.Status(r.Status).Send(r.Body)
}

// RequestHash identifies a request for the same-key-different-request
// check: SHA-256 over the method, path and body, each length-prefixed so
// that no two requests share an encoding.
func RequestHash(method, path string, body []byte) [32]byte {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(method), []byte(path), body} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(part))))
		h.Write(part)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
