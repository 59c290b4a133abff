package config

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// The rules config.yaml and the admin API share: the bounds of an
// endpoint's settings, what an endpoint URL may be, and which admin
// tokens may guard a listener reachable from other hosts.

// Bounds of an endpoint's settings, in config.yaml and the admin API alike:
// every event is matched against the event_types of every endpoint of its
// tenant, and every delivery carries its endpoint's URL and headers, on a
// gateway the tenants share. Unbounded, one tenant's endpoint with 60,000
// globs cost every ingest of that tenant ~0.3 s of CPU.
const (
	// MaxTypeGlob bounds a glob of types: an endpoint's, and the type
	// filter of GET /events (a plain type is at most the 512 bytes ingest
	// takes).
	MaxTypeGlob          = 128
	MaxEventTypes        = 256     // globs of one endpoint, each at most MaxTypeGlob bytes
	MaxURLBytes          = 4096    // an endpoint URL (servers refuse much longer request lines)
	MaxStaticHeaders     = 64      // static headers of one endpoint
	MaxStaticHeaderBytes = 8 << 10 // their names and values together, in bytes
)

// EventTypesProblem says what is wrong with an endpoint's event_types
// beyond each glob's syntax: the field at fault (i is -1 for the list) and
// why; "" when nothing is.
func EventTypesProblem(globs []string) (i int, problem string) {
	if len(globs) > MaxEventTypes {
		return -1, fmt.Sprintf("has %d globs, more than the %d an endpoint may have", len(globs), MaxEventTypes)
	}
	for i, g := range globs {
		if len(g) > MaxTypeGlob {
			return i, fmt.Sprintf("is %d bytes, more than the %d a glob may have", len(g), MaxTypeGlob)
		}
	}
	return 0, ""
}

// HeadersProblem says what is wrong with the size of an endpoint's static
// headers, "" when nothing is.
func HeadersProblem(h map[string]string) string {
	size := 0
	for k, v := range h {
		size += len(k) + len(v)
	}
	switch {
	case len(h) > MaxStaticHeaders:
		return fmt.Sprintf("has %d headers, more than the %d an endpoint may have", len(h), MaxStaticHeaders)
	case size > MaxStaticHeaderBytes:
		return fmt.Sprintf("names and values are %d bytes together, more than %d", size, MaxStaticHeaderBytes)
	}
	return ""
}

// URLProblem says what is wrong with an endpoint URL, "" if nothing. It
// never quotes the URL: it may carry credentials.
func URLProblem(raw string) string {
	if len(raw) > MaxURLBytes {
		return fmt.Sprintf("is %d bytes, more than %d", len(raw), MaxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "is not a valid URL"
	}
	port, perr := strconv.Atoi(cmp.Or(u.Port(), "1"))
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "must be an absolute http:// or https:// URL"
	case u.Hostname() == "":
		return "must have a host"
	case perr != nil || port < 1 || port > 65535:
		return "has a port outside 1-65535"
	case u.User != nil:
		return "must not contain user info; put credentials in headers"
	case strings.ContainsRune(u.RawQuery, ' '):
		return "has a space in its query; write it as %20"
	case !Sendable(raw):
		return "is not a URL a request can be sent to (an invalid internationalized host, or characters no server reads in a request line)"
	}
	return ""
}

// Sendable reports whether net/http can write a request to raw, and an
// HTTP server read it back: a host that is not ASCII must pass IDNA's
// lookup profile, as net/http applies it when it writes the request, and
// the request line must parse (net/http sends a query as written).
func Sendable(raw string) bool {
	req, err := http.NewRequest(http.MethodPost, raw, nil)
	if err != nil {
		return false
	}
	var b bytes.Buffer
	if req.Write(&b) != nil {
		return false
	}
	_, err = http.ReadRequest(bufio.NewReader(&b))
	return err == nil
}

// IndexedField is key[i], or key itself for i < 0.
func IndexedField(key string, i int) string {
	if i < 0 {
		return key
	}
	return fmt.Sprintf("%s[%d]", key, i)
}

// DevAdminToken is the fallback token of the root config.yaml, for local
// trials: a gateway refuses it on an admin listener that is not loopback.
const DevAdminToken = "dev-admin-token"

// MinExposedToken is the shortest admin token accepted on an admin
// listener reachable from other hosts: 16 bytes, 128 bits if random (a
// short token there can be guessed; on loopback it guards a local trial).
const MinExposedToken = 16

// ExposedWeakToken returns the index of the first weak token in a's tokens
// (the trial token, or one shorter than MinExposedToken) and why it is
// refused, when a's listener is reachable from other hosts; else -1 (also
// for an address that does not parse: that is reported as such). The
// reason never quotes a configured token.
func ExposedWeakToken(a AdminConfig) (int, string) {
	host, _, err := net.SplitHostPort(a.Listen)
	if ip := net.ParseIP(host); err != nil || host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return -1, ""
	}
	for i, t := range a.Tokens {
		switch {
		case t.Token == DevAdminToken:
			return i, "the trial token " + DevAdminToken + " is refused on a non-loopback admin.listen; set HOOKGATE_ADMIN_TOKEN"
		case t.Token != "" && len(t.Token) < MinExposedToken:
			return i, fmt.Sprintf("a token of %d bytes is refused on a non-loopback admin.listen: at least %d are required (openssl rand -hex 32 makes one)", len(t.Token), MinExposedToken)
		}
	}
	return -1, ""
}

// CheckAdminExposure fails closed when a weak token would guard an admin
// listener reachable from other hosts. Parse reports the same as a
// config error with its line, so that check-config refuses what serve
// would; this is the last line of defence for a Config built otherwise.
func CheckAdminExposure(cfg *Config) error {
	if _, _, err := net.SplitHostPort(cfg.Admin.Listen); err != nil {
		return fmt.Errorf("admin.listen: %w", err)
	}
	if i, why := ExposedWeakToken(cfg.Admin); i >= 0 {
		return fmt.Errorf("admin.tokens[%d].token: %s", i, why)
	}
	return nil
}
