package admin

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"

	"hookgate/gateway/config"
	"hookgate/outbound"
	"hookgate/storage"

	"github.com/gofiber/fiber/v2"
)

// Validation shared by the admin API's resources: the rules config.yaml
// applies (SPEC section 2), answered as problems naming the field. No
// problem quotes a value that could be a secret.

// naming says which resource a validation problem is about, as a config
// error names the entry's id: "endpoint ep_1: must be …". Only an id of
// valid syntax is named (anything else could be any text the caller sent);
// other errors pass unchanged.
func naming(err error, kind, id string) error {
	ae, ok := errors.AsType[*apiError](err)
	if !ok || (ae.Status != fiber.StatusBadRequest && ae.Status != fiber.StatusUnprocessableEntity) || !config.IDPattern.MatchString(id) {
		return err
	}
	named := *ae
	named.Detail = kind + " " + id + ": " + ae.Detail
	return &named
}

// quoteID is an id of valid syntax quoted and followed by a space, for a
// problem's detail; "" for anything else.
func quoteID(id string) string {
	if !config.IDPattern.MatchString(id) {
		return ""
	}
	return strconv.Quote(id) + " "
}

// checkID checks the syntax of a source or endpoint id: a URL path segment.
func checkID(id string) error {
	if !config.IDPattern.MatchString(id) {
		return unprocessable("id", "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	return nil
}

// checkTenant checks the tenant of a new resource: required, and the
// token's own for a tenant-scoped token.
func checkTenant(p principal, tenant string) error {
	switch {
	case tenant == "":
		return unprocessable("tenant", "must not be empty")
	case !config.IDPattern.MatchString(tenant):
		return unprocessable("tenant", config.TenantRule)
	case !p.sees(tenant):
		return unprocessable("tenant", "must be the tenant of your token")
	}
	return nil
}

// cmpOrTenant is the tenant of a resource created without one: the
// token's, or DefaultTenant for the operator (as in config.yaml).
func cmpOrTenant(p principal) string {
	if p.operator() {
		return config.DefaultTenant
	}
	return p.tenant
}

// checkURL accepts absolute http(s) URLs with a host, a port if any in
// 1-65535, and no user info (config.yaml's rule too).
func checkURL(raw string) error {
	if raw == "" {
		return unprocessable("url", "required")
	}
	if p := config.URLProblem(raw); p != "" {
		return unprocessable("url", p)
	}
	return nil
}

// checkTarget refuses, at creation, an endpoint every delivery to which
// would be refused: better a 422 now than a delivery failing for a day.
func (a *API) checkTarget(raw string) error {
	if a.d.Config.Delivery.AllowPrivateTargets {
		return nil
	}
	if reason, blocked := outbound.BlockedURL(raw); blocked {
		return unprocessable("url", "points at a "+reason+" address, and delivery.allow_private_targets is false: every delivery would be refused")
	}
	return nil
}

func checkHeaders(h map[string]string) error {
	if p := config.HeadersProblem(h); p != "" {
		return unprocessable("headers", p)
	}
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(h)) {
		field := "headers." + name
		lower := strings.ToLower(name)
		switch {
		case !config.ValidHeaderName(name):
			return unprocessable("headers", "contains a name that is not a valid header name")
		case slices.Contains(config.ReservedHeaders, lower) || config.HasAnyPrefix(lower, config.ReservedHeaderPrefixes):
			return unprocessable(field, "is set by hookgate and cannot be overridden")
		case seen[lower]:
			return unprocessable(field, "duplicate header (names are case-insensitive)")
		case !config.ValidHeaderValue(h[name]):
			return unprocessable(field, "value contains control characters or line breaks")
		}
		seen[lower] = true
	}
	return nil
}

// checkRetry applies the config's rules to a retry policy.
func checkRetry(r storage.RetryPolicy) error {
	switch {
	case r.Multiplier < 1:
		return unprocessable("retry.multiplier", "must be at least 1")
	case r.Randomization < 0 || r.Randomization > 1:
		return unprocessable("retry.randomization", "must be between 0 and 1")
	case r.MaxAttempts < 1:
		return unprocessable("retry.max_attempts", "must be at least 1")
	case r.InitialInterval > r.MaxInterval:
		return unprocessable("retry.initial_interval", "must not exceed retry.max_interval")
	}
	return nil
}
