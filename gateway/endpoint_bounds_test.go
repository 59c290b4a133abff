package gateway

import (
	"context"
	"fmt"
	"hookgate/storage"
	"strings"
	"testing"
)

// An endpoint's event_types, URL and static headers are bounded, in the
// admin API and in config.yaml alike: every event of a tenant is matched
// against the event_types of each of its endpoints, and every delivery
// carries the URL and headers, on a gateway the tenants share. Before,
// one tenant token could store 60,000 globs (each ingest of its events
// then cost ~0.3 s of CPU), a 200 KB URL or a 200 KB header. At the bound
// each is taken; past it, a 422 (or a config error) names the field.
func TestEndpointSettingsAreBounded(t *testing.T) {
	globs := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			g := fmt.Sprintf("t%d.*", i)
			out[i] = g + strings.Repeat("x", size-len(g))
		}
		return out
	}
	headers := func(n, valueSize int) map[string]string {
		h := map[string]string{}
		for i := range n {
			h[fmt.Sprintf("X-H%d", i)] = strings.Repeat("v", valueSize)
		}
		return h
	}
	longURL := func(n int) string {
		u := "http://receiver.test/"
		return u + strings.Repeat("p", n-len(u))
	}
	for _, c := range []struct {
		name  string
		body  jsonMap
		field string // "" = accepted
	}{
		{"256 globs of 128 bytes", jsonMap{"event_types": globs(256, 128)}, ""},
		{"257 globs", jsonMap{"event_types": globs(257, 8)}, "event_types"},
		{"a glob of 129 bytes", jsonMap{"event_types": append(globs(3, 8), globs(1, 129)...)}, "event_types[3]"},
		{"a URL of 4096 bytes", jsonMap{"url": longURL(4096)}, ""},
		{"a URL of 4097 bytes", jsonMap{"url": longURL(4097)}, "url"},
		{"64 headers, just under 8 KiB in all", jsonMap{"headers": headers(64, 120)}, ""},
		{"65 headers", jsonMap{"headers": headers(65, 1)}, "headers"},
		{"one header of 8 KiB", jsonMap{"headers": headers(1, 8<<10)}, "headers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := startGateway(t, gwOptions{})
			body := jsonMap{"url": "http://receiver.test/x"}
			for k, v := range c.body {
				body[k] = v
			}
			st, hdr, b := g.api("POST", "/endpoints", acmeToken, body)
			if c.field == "" {
				if st != 201 {
					t.Fatalf("POST /endpoints: %d %s, want 201 at the bound", st, b)
				}
				return
			}
			if p := decodeProblem(t, hdr, b); st != 422 || p.Field != c.field {
				t.Fatalf("POST /endpoints: %d, field %q (%s); want 422 naming %s", st, p.Field, b, c.field)
			}
		})
	}
	// config.yaml: the same bounds, with the key and line.
	types := strings.Join(globs(257, 8), ", ")
	for _, c := range []struct{ name, entry, want string }{
		{"257 globs", "{id: e, tenant: acme, url: \"http://receiver.test/x\", event_types: [" + types + "]}", "endpoints[0] (id e).event_types: has 257 globs, more than the 256"},
		{"a glob of 129 bytes", "{id: e, tenant: acme, url: \"http://receiver.test/x\", event_types: [" + globs(1, 129)[0] + "]}", "endpoints[0] (id e).event_types[0]: is 129 bytes"},
		{"a URL of 4097 bytes", "{id: e, tenant: acme, url: \"" + longURL(4097) + "\"}", "endpoints[0] (id e).url: is 4097 bytes"},
		{"65 headers", "{id: e, tenant: acme, url: \"http://receiver.test/x\", headers: {X-A: v" + headerYAML(64) + "}}", "endpoints[0] (id e).headers: has 65 headers"},
	} {
		_, err := ParseConfig([]byte("admin: {tokens: [{token: t0123456789abcdef}]}\nendpoints:\n  - "+c.entry+"\n"), "test.yaml", nil)
		if err == nil || !strings.Contains(err.Error(), "test.yaml:3: "+c.want) {
			t.Errorf("config.yaml with %s: %v; want %q", c.name, err, c.want)
		}
	}
}

// headerYAML is n more flow-mapping header entries, each ", X-Hn: v".
func headerYAML(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, ", X-H%d: v", i)
	}
	return b.String()
}

// An endpoint stored by an earlier build, which took any max_in_flight
// through the admin API, keeps its value after the upgrade. A PATCH of
// another field (here: disabling it during an incident) must still be
// possible, as it is for a stored timeout over 1h or a source deleted
// since: the whole merged endpoint was validated, so every PATCH was 422
// "max_in_flight must be from 1 to 10000" until the operator also lowered
// max_in_flight.
func TestPatchOfEndpointStoredWithLargeMaxInFlight(t *testing.T) {
	g := startGateway(t, gwOptions{})
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "wide", "url": "http://receiver.test/wide"}))
	// What an earlier build stored.
	if _, err := g.Store().UpdateEndpoint(context.Background(), "wide", func(ep *storage.Endpoint) error {
		ep.MaxInFlight = 50_000
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	g = g.restart(gwOptions{})
	st, _, b := g.api("PATCH", "/endpoints/wide", acmeToken, jsonMap{"disabled": true})
	if st != 200 {
		t.Fatalf("PATCH {disabled: true} of an endpoint stored with max_in_flight 50000: %d %s; want 200", st, b)
	}
}
