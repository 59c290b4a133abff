package admin

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gofiber/fiber/v2"

	"hookgate/gateway/config"
	"hookgate/inbound"
	"hookgate/storage"
)

// Source is a source as the admin API shows it: the config keys of
// SPEC section 2 without the verify secrets, which are write-only.
type Source struct {
	ID         string     `json:"id"`
	Tenant     string     `json:"tenant"`
	Verify     verifyView `json:"verify"`
	EventID    string     `json:"event_id"`
	EventType  string     `json:"event_type"`
	FromConfig bool       `json:"from_config"`
	CreatedAt  string     `json:"created_at"`
	UpdatedAt  string     `json:"updated_at"`
}

// verifyView is a verify block without its secrets.
type verifyView struct {
	Scheme    string `json:"scheme"`
	Tolerance string `json:"tolerance,omitempty"`
	Header    string `json:"header,omitempty"`
	Algorithm string `json:"algorithm,omitempty"`
	Encoding  string `json:"encoding,omitempty"`
	Prefix    string `json:"prefix,omitempty"`
}

func newSourceView(s *storage.Source) Source {
	v := Source{
		ID: s.ID, Tenant: s.Tenant, EventID: s.EventID, EventType: s.EventType, FromConfig: s.FromConfig,
		CreatedAt: apiTime(s.CreatedAt), UpdatedAt: apiTime(s.UpdatedAt),
		Verify: verifyView{
			Scheme: s.Verify.Scheme, Header: s.Verify.Header, Algorithm: s.Verify.Algorithm,
			Encoding: s.Verify.Encoding, Prefix: s.Verify.Prefix,
		},
	}
	if s.Verify.Tolerance > 0 && slices.Contains(config.TimestampSchemes, s.Verify.Scheme) {
		v.Verify.Tolerance = s.Verify.Tolerance.String()
	}
	return v
}

// sourceBody is the body of POST and PATCH /sources (absent = unchanged in
// a PATCH, default in a POST).
type sourceBody struct {
	ID        *string     `json:"id"`
	Tenant    *string     `json:"tenant"`
	Verify    *verifyBody `json:"verify"`
	EventID   *string     `json:"event_id"`
	EventType *string     `json:"event_type"`
}

// verifyBody is a verify block; Secrets may be written, never read.
type verifyBody struct {
	Scheme    *string   `json:"scheme"`
	Secrets   *[]string `json:"secrets"`
	Tolerance *string   `json:"tolerance"`
	Header    *string   `json:"header"`
	Algorithm *string   `json:"algorithm"`
	Encoding  *string   `json:"encoding"`
	Prefix    *string   `json:"prefix"`
}

// listSources is GET /sources, ordered by id.
func (a *API) listSources(c *fiber.Ctx) error {
	p, err := parsePage(c)
	if err != nil {
		return err
	}
	srcs, err := a.d.Store.ListSources(c.UserContext())
	if err != nil {
		return a.storeError(err, "source")
	}
	srcs = slices.DeleteFunc(srcs, func(s storage.Source) bool { return !who(c).sees(s.Tenant) })
	out, err := pageByID(srcs, "source", func(s *storage.Source) string { return s.ID }, p)
	if err != nil {
		return err
	}
	views := List[Source]{Data: make([]Source, len(out.Data)), NextCursor: out.NextCursor}
	for i := range out.Data {
		views.Data[i] = newSourceView(&out.Data[i])
	}
	return c.JSON(views)
}

// getSource is GET /sources/{id}.
func (a *API) getSource(c *fiber.Ctx) error {
	src, err := a.visibleSource(c)
	if err != nil {
		return err
	}
	return c.JSON(newSourceView(&src))
}

func (a *API) visibleSource(c *fiber.Ctx) (storage.Source, error) {
	src, err := a.d.Store.GetSource(c.UserContext(), c.Params("id"))
	if err != nil {
		return src, a.storeError(err, "source")
	}
	if !who(c).sees(src.Tenant) {
		return src, notFound("source")
	}
	return src, nil
}

// createSource is POST /sources: 201 with the source. Its id is its ingest
// path (/ingest/{id}), so it is required; verify is required too (a source
// fails closed: scheme none must be written).
func (a *API) createSource(c *fiber.Ctx) (err error) {
	var in sourceBody
	if err := decodeJSON(c, &in, false); err != nil {
		return err
	}
	now := a.now()
	src := storage.Source{Tenant: cmpOrTenant(who(c)), CreatedBy: createdBy(c), CreatedAt: now, UpdatedAt: now,
		Verify: storage.VerifyConfig{Tolerance: config.DefaultVerifyTolerance.D()}}
	switch {
	case in.ID == nil:
		return unprocessable("id", "required: it is the source's ingest path, /ingest/{id}")
	case in.Verify == nil:
		return unprocessable("verify", "required: say how requests are verified; write scheme none to accept unsigned requests")
	case *in.ID == storage.NoticeSource:
		return unprocessable("id", "is the source of hookgate's own operational events: choose another")
	}
	src.ID = *in.ID
	defer func() { err = naming(err, "source", src.ID) }()
	if in.Tenant != nil {
		src.Tenant = *in.Tenant
	}
	if err := checkTenant(who(c), src.Tenant); err != nil {
		return err
	}
	if err := in.apply(&src); err != nil {
		return err
	}
	a.catalogMu.Lock()
	defer a.catalogMu.Unlock()
	ctx, cancel := writeContext(c)
	defer cancel()
	if old, err := a.d.Store.GetSource(ctx, src.ID); err == nil {
		if src.CreatedBy != "" && old.CreatedBy == src.CreatedBy && old.Tenant == src.Tenant {
			// An earlier run of this request under its Idempotency-Key
			// made it: that is the answer.
			a.d.Registry.Reload() // unless it is in memory (a write whose outcome was unknown)
			return c.Status(fiber.StatusCreated).JSON(newSourceView(&old))
		}
		return newAPIError(fiber.StatusConflict, "already-exists", "id", "a source with this id already exists")
	} else if !errors.Is(err, storage.ErrNotFound) {
		return a.storeError(err, "source")
	}
	return a.saveSource(c, &src, fiber.StatusCreated)
}

// patchSource is PATCH /sources/{id}: the fields present replace the
// stored ones; inside verify too (secrets absent = kept).
func (a *API) patchSource(c *fiber.Ctx) (err error) {
	var in sourceBody
	if err := decodeJSON(c, &in, false); err != nil {
		return err
	}
	a.catalogMu.Lock()
	defer a.catalogMu.Unlock()
	src, err := a.visibleSource(c)
	if err != nil {
		return err
	}
	defer func() { err = naming(err, "source", src.ID) }()
	switch {
	case in.ID != nil && *in.ID != src.ID:
		return unprocessable("id", "cannot be changed")
	case in.Tenant != nil && *in.Tenant != src.Tenant:
		return unprocessable("tenant", "cannot be changed")
	}
	if err := in.apply(&src); err != nil {
		return err
	}
	src.UpdatedAt = a.now()
	return a.saveSource(c, &src, fiber.StatusOK)
}

// deleteSource is DELETE /sources/{id}: ingest answers 404 for it from now
// on; its events and their deliveries stay.
func (a *API) deleteSource(c *fiber.Ctx) error {
	a.catalogMu.Lock()
	defer a.catalogMu.Unlock()
	src, err := a.visibleSource(c)
	if err != nil {
		return err
	}
	ctx, cancel := writeContext(c)
	defer cancel()
	// Exclusive until the registry no longer has it: ingests of it that
	// were in flight have counted, so forgetting its series is final.
	err = a.d.Registry.Exclusive(func() error {
		if err := a.d.Store.DeleteSource(ctx, src.ID); err != nil {
			return a.catalogError(err, "source")
		}
		a.d.Registry.Reload()
		return nil
	})
	if err != nil {
		return err
	}
	a.d.Metrics.ForgetSource(src.ID)
	return c.SendStatus(fiber.StatusNoContent)
}

func (a *API) saveSource(c *fiber.Ctx, src *storage.Source, status int) error {
	ctx, cancel := writeContext(c)
	defer cancel()
	if err := a.d.Store.PutSource(ctx, src); err != nil {
		return a.catalogError(err, "source")
	}
	a.d.Registry.Reload()
	return c.Status(status).JSON(newSourceView(src))
}

// apply writes the fields present in b onto src and validates the result
// as config.yaml would: id syntax, expressions, and a verifier that builds
// (inbound.CompileSource). Problems name fields, never secret values.
func (b *sourceBody) apply(src *storage.Source) error {
	if b.EventID != nil {
		src.EventID = *b.EventID
	}
	if b.EventType != nil {
		src.EventType = *b.EventType
	}
	if b.Verify != nil {
		if err := b.Verify.apply(&src.Verify); err != nil {
			return err
		}
	}
	if err := checkID(src.ID); err != nil {
		return err
	}
	for _, e := range []struct{ field, expr string }{{"event_id", src.EventID}, {"event_type", src.EventType}} {
		if _, err := inbound.ParseExpr(e.expr); e.expr != "" && err != nil {
			return unprocessable(e.field, "is not a valid expression (header:NAME, json:/pointer or query:NAME, joined with +)")
		}
	}
	if src.Verify.Scheme == inbound.SchemeHMAC {
		src.Verify.Algorithm = cmp.Or(src.Verify.Algorithm, config.DefaultHMACAlgorithm)
		src.Verify.Encoding = cmp.Or(src.Verify.Encoding, config.DefaultHMACEncoding)
	}
	if _, err := inbound.CompileSource(*src); err != nil {
		if ce, ok := errors.AsType[*inbound.ConfigError](err); ok {
			return unprocessable("verify."+ce.Field, ce.Problem)
		}
		return unprocessable("verify", "is not a valid verify block")
	}
	if ps := inbound.SecretProblems(src.Verify.Scheme, src.Verify.Secrets); len(ps) > 0 {
		return unprocessable("verify."+ps[0].Field, ps[0].Problem)
	}
	return nil
}

// apply writes the fields present in v onto out. A change of scheme drops
// the hmac-only fields the body does not set again: they belonged to the
// old scheme.
func (v *verifyBody) apply(out *storage.VerifyConfig) error {
	if v.Scheme != nil && *v.Scheme != out.Scheme {
		out.Header, out.Algorithm, out.Encoding, out.Prefix = "", "", "", ""
	}
	if v.Tolerance != nil {
		d, err := time.ParseDuration(*v.Tolerance)
		if err != nil || d <= 0 {
			return unprocessable("verify.tolerance", `must be a Go duration greater than 0, e.g. "5m"`)
		}
		out.Tolerance = d
	}
	for _, f := range []struct {
		in  *string
		out *string
	}{
		{v.Scheme, &out.Scheme}, {v.Header, &out.Header}, {v.Algorithm, &out.Algorithm},
		{v.Encoding, &out.Encoding}, {v.Prefix, &out.Prefix},
	} {
		if f.in != nil {
			*f.out = *f.in
		}
	}
	if v.Secrets != nil {
		out.Secrets = *v.Secrets
		// As config.yaml has it: the sender shows a Standard Webhooks
		// secret as whsec_ + base64. (Stored secrets are not checked again.)
		for i, sec := range out.Secrets {
			if out.Scheme == inbound.SchemeStandardWebhooks && sec != "" && !config.ValidWhsec(sec, 1) {
				return unprocessable(fmt.Sprintf("verify.secrets[%d]", i), "must be whsec_ followed by base64, as the sender shows it")
			}
		}
	}
	switch {
	case !slices.Contains(config.TimestampSchemes, out.Scheme) && v.Tolerance != nil:
		return unprocessable("verify.tolerance", "scheme "+out.Scheme+" signs no timestamp, so a tolerance would be ignored; remove it")
	case !slices.Contains(config.TimestampSchemes, out.Scheme):
		out.Tolerance = 0 // a stale one of the scheme before
	case out.Tolerance == 0:
		out.Tolerance = config.DefaultVerifyTolerance.D()
	}
	return nil
}
