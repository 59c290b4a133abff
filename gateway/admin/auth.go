package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"hookgate/gateway/config"

	"github.com/gofiber/fiber/v2"
)

// adminToken is a configured bearer token, kept as its SHA-256 so that
// every comparison takes the same time whatever the presented token's
// length.
type adminToken struct {
	hash   [sha256.Size]byte
	tenant string
}

func hashTokens(ts []config.TokenConfig) []adminToken {
	out := make([]adminToken, len(ts))
	for i, t := range ts {
		out[i] = adminToken{hash: sha256.Sum256([]byte(t.Token)), tenant: t.Tenant}
	}
	return out
}

// principal is who a request acts as: a tenant, or the operator ("").
type principal struct {
	tenant string
}

// localPrincipal is the Fiber local the authenticated principal is kept in.
const localPrincipal = "hookgate.principal"

// operator reports whether p sees every tenant.
func (p principal) operator() bool { return p.tenant == "" }

// sees reports whether p may see and change a resource of tenant.
func (p principal) sees(tenant string) bool { return p.operator() || p.tenant == tenant }

// scope is the tenant filter of p's list requests ("" = all tenants).
func (p principal) scope() string { return p.tenant }

// authenticate checks the bearer token against every configured token in
// constant time (no early exit, no length leak) and records the principal.
// A missing or unknown token is 401 with WWW-Authenticate.
func (a *API) authenticate(c *fiber.Ctx) error {
	tok, ok := bearerToken(c.Get(fiber.HeaderAuthorization))
	presented := sha256.Sum256([]byte(tok))
	match := -1
	for i := range a.tokens {
		eq := subtle.ConstantTimeCompare(presented[:], a.tokens[i].hash[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if !ok || match < 0 {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="hookgate"`)
		detail := "an Authorization: Bearer <token> header is required"
		if ok {
			detail = "the bearer token is not valid"
		}
		return newAPIError(fiber.StatusUnauthorized, "unauthorized", "", detail)
	}
	c.Locals(localPrincipal, principal{tenant: a.tokens[match].tenant})
	return c.Next()
}

// bearerToken extracts the token of an "Authorization: Bearer <token>"
// header (scheme case-insensitive, RFC 6750).
func bearerToken(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// nobody is the principal of a request that did not go through
// authenticate: a tenant no resource has, so a route registered without
// the middleware by mistake fails closed (404s, empty lists), never open.
var nobody = principal{tenant: "\x00unauthenticated"}

// who returns the principal authenticate recorded.
func who(c *fiber.Ctx) principal {
	if p, ok := c.Locals(localPrincipal).(principal); ok {
		return p
	}
	return nobody
}
