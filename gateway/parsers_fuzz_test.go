package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"hookgate/gateway/admin"
	"hookgate/gateway/problem"
	"hookgate/inbound"

	"github.com/valyala/fasthttp"
)

// Fuzz targets for the parsers of outside input in package gateway that
// other targets do not cover: the ingest request as a whole on the
// public listener (headers, query, body, Idempotency-Key, Content-Type ->
// event ID, type, stored event, answer), the admin Authorization header,
// ${VAR} expansion of config values, sizes, endpoint URLs, and
// HOOKGATE_LOG_LEVEL.

// ---------------------------------------------------------------- ingest

// fuzzIngest is a gateway (not started: no listener, no dispatcher) whose
// public app FuzzIngest calls.
type fuzzIngest struct{ g *Gateway }

const fuzzIngestSources = `  - id: comp
    tenant: acme
    verify: {scheme: none}
    event_id: "query:q+header:X-Id"
    event_type: "header:X-Type"
`

func newFuzzIngest(f *testing.F) *fuzzIngest {
	f.Helper()
	return &fuzzIngest{g: newIdleGateway(f, fuzzIngestSources)}
}

// headerSafe drops what cannot be in a header value on the wire at all.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' && r != '\t' || r == 0x7f || r == utf8.RuneError {
			return -1
		}
		return r
	}, s)
}

// refPointer is the test's own JSON pointer lookup of a one-token pointer,
// with encoding/json: the scalar at member name, rendered as JSON text for
// numbers and as true/false for booleans.
func refPointer(body []byte, name string) string {
	if !json.Valid(body) {
		return ""
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return ""
	}
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	switch x := m[name].(type) {
	case string:
		return x
	case json.Number:
		return string(x)
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}

var fuzzIngestRoutes = []string{"open", "other", "comp", "sw"}

// FuzzIngest fuzzes one ingest request: source, body, the headers the
// sources read (X-Id, X-Type, webhook-id, Idempotency-Key, Content-Type)
// and the query parameter q, signed correctly or not. It checks the answer
// against the test's own reading of SPEC sections 2 and 3: the event ID is
// the expression's value, else the Idempotency-Key, else the body's
// SHA-256; a 202 says that ID and the stored event has it, with the body
// byte for byte and its Content-Type; errors are problem+json, never 5xx;
// the same request again gets the byte-identical answer, replayed.
func FuzzIngest(f *testing.F) {
	fi := newFuzzIngest(f)
	for _, s := range []struct {
		src                        uint8
		body, id, typ, q, idem, ct string
		sign                       bool
	}{
		{0, `{"id":"evt_1NgGm2A","type":"invoice.paid"}`, "", "", "", "", "application/json", false},
		{0, `{"id":12.50,"type":true}`, "", "", "", "k1", "application/json; charset=utf-8", false},
		{0, `{"id":"","type":"x"}`, "", "", "", "", "", false},
		{0, "{\"id\":\"caf\xe9\"}", "", "", "", "", "text/plain", false},
		{1, `anything`, "", "", "", "idem-1", "application/octet-stream", false},
		{1, ``, "", "", "", "", "", false},
		{2, `{}`, "42", "orders/create", "shop 1+2", "", "application/json", false},
		{2, `{}`, "  spaced  ", "\tt\t", "q", "", "application/json", false},
		{2, `{}`, "x", "", "", "fallback", "", false},
		{3, `{"type":"user.created"}`, "msg_2Lh", "", "", "", "application/json", true},
		{3, `{"type":"user.created"}`, "msg_2Lh", "", "", "", "application/json", false},
		{0, `{"id":"` + strings.Repeat("a", 513) + `"}`, "", "", "", "", "", false},
	} {
		f.Add(s.src, []byte(s.body), s.id, s.typ, s.q, s.idem, s.ct, s.sign)
	}
	f.Fuzz(func(t *testing.T, src uint8, body []byte, id, typ, q, idem, ct string, sign bool) {
		source := fuzzIngestRoutes[int(src)%len(fuzzIngestRoutes)]
		id, typ, idem, ct = headerSafe(id), headerSafe(typ), headerSafe(idem), headerSafe(ct)
		trim := func(s string) string { return strings.Trim(s, " \t") }
		hdr := map[string]string{"X-Id": id, "X-Type": typ, "Idempotency-Key": idem, "Content-Type": ct}
		if source == "sw" {
			delete(hdr, "X-Id")
			hdr["webhook-id"] = id
			if sign {
				for k, v := range signSW(trim(id), time.Now(), body) {
					if k != "webhook-id" {
						hdr[k] = v
					}
				}
			}
		}
		target := "/ingest/" + source
		if q != "" {
			target += "?" + url.Values{"q": {q}}.Encode()
		}
		st, h, b := fi.post(t, target, body, hdr)

		// The test's own reading of the event ID and type.
		var wantID, wantType string
		switch source {
		case "open":
			wantID, wantType = refPointer(body, "id"), refPointer(body, "type")
		case "comp":
			if q != "" && trim(id) != "" {
				wantID = q + "/" + trim(id)
			}
			wantType = trim(typ)
		case "sw":
			wantID, wantType = trim(id), refPointer(body, "type")
		}
		if wantID == "" && trim(idem) != "" {
			wantID = trim(idem)
		}
		if wantID == "" {
			sum := sha256.Sum256(body)
			wantID = hex.EncodeToString(sum[:])
		}

		switch {
		case st >= 500:
			t.Fatalf("%s: %d %s", target, st, b)
		case st >= 400:
			var p problem.Details
			if err := json.Unmarshal(b, &p); err != nil || p.Status != st || h.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%s: %d with a body that is not a problem: %s", target, st, b)
			}
		}
		signed := source != "sw" || (sign && trim(id) != "")
		tooLong := len(wantID) > 512 || len(wantType) > 512
		switch {
		case len(body) > 4<<10:
			if st != 413 {
				t.Fatalf("%s: body of %d bytes over max_body 4KiB: %d %s", target, len(body), st, b)
			}
			return
		case !signed:
			if st != 401 {
				t.Fatalf("%s unsigned: %d %s, want 401", target, st, b)
			}
			return
		case tooLong:
			if st != 400 {
				t.Fatalf("%s: event id of %d bytes, type of %d: %d %s, want 400", target, len(wantID), len(wantType), st, b)
			}
			return
		case st == 422:
			// The same event ID was seen with another body (an earlier input).
		case st != 202:
			t.Fatalf("%s: %d %s, want 202 (event id %q)", target, st, b, wantID)
		}
		if st == 202 {
			var ans struct{ ID, EventID string }
			ans.EventID = "\x00unset"
			if err := json.Unmarshal(b, &struct {
				ID      *string `json:"id"`
				EventID *string `json:"event_id"`
			}{&ans.ID, &ans.EventID}); err != nil || !utf8.Valid(b) {
				t.Fatalf("%s: 202 body %q is not JSON: %v", target, b, err)
			}
			ref, _ := json.Marshal(wantID)
			var wantShown string
			_ = json.Unmarshal(ref, &wantShown)
			if ans.EventID != wantShown {
				t.Fatalf("%s: 202 says event_id %q, want %q", target, ans.EventID, wantID)
			}
			ev, err := fi.g.store.GetEvent(context.Background(), ans.ID)
			if err != nil {
				t.Fatalf("%s: 202 for %s, which the store does not have: %v", target, ans.ID, err)
			}
			if ev.EventID != wantID || !bytes.Equal(ev.Body, body) || ev.Source != source {
				t.Fatalf("%s: stored event id %q body %q source %q; want %q, %q, %q", target, ev.EventID, ev.Body, ev.Source, wantID, body, source)
			}
			if h.Get(inbound.HeaderReplayed) == "" {
				if ev.Type != wantType {
					t.Fatalf("%s: stored type %q, want %q", target, ev.Type, wantType)
				}
				if ev.ContentType != trim(ct) {
					t.Fatalf("%s: stored Content-Type %q, sent %q", target, ev.ContentType, ct)
				}
			}
		}
		st2, h2, b2 := fi.post(t, target, body, hdr)
		if st2 != st || !bytes.Equal(b2, b) {
			t.Fatalf("%s again: %d %s; first %d %s", target, st2, b2, st, b)
		}
		if st == 202 && h2.Get(inbound.HeaderReplayed) != "true" {
			t.Fatalf("%s again: 202 without %s", target, inbound.HeaderReplayed)
		}
	})
}

func (fi *fuzzIngest) post(t *testing.T, target string, body []byte, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://gw"+target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := fi.g.public.Test(req, -1)
	var tooLong *fasthttp.ErrSmallBuffer
	if errors.As(err, &tooLong) {
		t.Skip("request head over the read buffer (431 on a listener)")
	}
	if err != nil {
		t.Fatalf("POST %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// ---------------------------------------------------------- Authorization

// FuzzAdminAuthorization: whatever Authorization header comes in, the
// admin API lets the request through only when the header is "Bearer"
// (any case) and a configured token; a tenant token sees only its tenant;
// a refusal is 401 problem+json with WWW-Authenticate that never echoes
// the header, its token or a configured token.
func FuzzAdminAuthorization(f *testing.F) {
	fa := newFuzzAdmin(f)
	for _, h := range []string{"Bearer " + opToken, "bearer " + acmeToken, "BEARER  " + acmeToken + "  ", "Bearer\t" + opToken,
		"Basic b3BlcmF0b3ItdG9rZW4=", "Bearer " + opToken + "x", "Bearer " + opToken[:len(opToken)-1], "Bearer", "Bearer ",
		opToken, "Bearer " + opToken + " " + acmeToken, "Token " + acmeToken, "Bearer acme-token\u00a0", "Bearer \u2003acme-token", ""} {
		f.Add(h)
	}
	_, noTokenBody := fa.call(f, http.MethodGet, "/sources", "", nil, "")
	_, badTokenBody := fa.call(f, http.MethodGet, "/sources", "not-a-token", nil, "")
	f.Fuzz(func(t *testing.T, h string) {
		h = headerSafe(h)
		req, err := http.NewRequest(http.MethodGet, "http://admin/api/v1/sources", nil)
		if err != nil {
			t.Fatal(err)
		}
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		resp, err := fa.g.admin.Test(req, -1)
		var tooLong *fasthttp.ErrSmallBuffer
		if errors.As(err, &tooLong) {
			t.Skip("request head over the admin read buffer")
		}
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		// Blanks around the token are not part of it; the gateway also
		// drops Unicode spaces (U+00A0, U+2003), which is harmless.
		scheme, tok, _ := strings.Cut(strings.TrimSpace(h), " ")
		tok = strings.TrimSpace(tok)
		bearer := strings.EqualFold(scheme, "bearer")
		switch resp.StatusCode {
		case 200:
			var l admin.List[admin.Source]
			if err := json.Unmarshal(b, &l); err != nil {
				t.Fatalf("%q: 200 %s", h, b)
			}
			switch {
			case bearer && tok == opToken:
			case bearer && tok == acmeToken:
				for _, s := range l.Data {
					if s.Tenant != "acme" {
						t.Fatalf("%q: acme's token sees %+v", h, s)
					}
				}
			default:
				t.Fatalf("Authorization %q let through: %s", h, b)
			}
		case 401:
			var p problem.Details
			if err := json.Unmarshal(b, &p); err != nil || p.Status != 401 || resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatalf("%q: 401 %s, WWW-Authenticate %q", h, b, resp.Header.Get("WWW-Authenticate"))
			}
			if bearer && (tok == opToken || tok == acmeToken) {
				t.Fatalf("Authorization %q (a configured token) refused", h)
			}
			// The answer is one of two fixed texts: it can echo nothing.
			if !bytes.Equal(b, noTokenBody) && !bytes.Equal(b, badTokenBody) {
				t.Fatalf("%q: 401 body %s is not one of the fixed answers", h, b)
			}
		default:
			t.Fatalf("%q: %d %s", h, resp.StatusCode, b)
		}
	})
}

// ---------------------------------------------------------- endpoint URLs

// ------------------------------------------------------ HOOKGATE_LOG_LEVEL

// FuzzLogLevel: HOOKGATE_LOG_LEVEL is a level slog names (debug, info,
// warn, error, with an optional +/-offset, any case), or the process logs
// at info and reports the value it could not read.
func FuzzLogLevel(f *testing.F) {
	for _, s := range []string{"", "debug", "INFO", "warn+2", "error-1", "trace", "info+", "debug+99999999999999999999", "warning"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if strings.ContainsRune(v, 0) {
			return // not a possible environment value
		}
		t.Setenv("HOOKGATE_LOG_LEVEL", v)
		level, bad := logLevel()
		if v == "" {
			if level != slog.LevelInfo || bad != "" {
				t.Fatalf("unset: %v, %q", level, bad)
			}
			return
		}
		var ref slog.Level
		refErr := ref.UnmarshalText([]byte(v))
		switch {
		case refErr != nil && (level != slog.LevelInfo || bad != v):
			t.Fatalf("%q: level %v, reported %q; want info and the value reported", v, level, bad)
		case refErr == nil && (level != ref || bad != ""):
			t.Fatalf("%q: level %v, reported %q; want %v", v, level, bad, ref)
		}
	})
}

// ------------------------------------------------------------- path ids

// FuzzAdminPathIDs fuzzes the {id} of every admin route that reads one, as
// the operator or as tenant acme: never a 5xx, every error a problem, and
// a tenant's 2xx answer is about its own tenant's resource.
func FuzzAdminPathIDs(f *testing.F) {
	fa := newFuzzAdmin(f)
	for _, id := range []string{fa.evt, fa.dlv, "ep", "open", "other", "evt_00000000000000000000000000", "dlv_", "rpl_x",
		"..", "%00", "a\x00b", "evt_" + strings.Repeat("Z", 26), strings.Repeat("a", 600), "é", "%2F"} {
		f.Add(uint8(0), id, false)
		f.Add(uint8(1), id, true)
	}
	routes := [][3]string{
		{http.MethodGet, "/events/", ""}, {http.MethodGet, "/deliveries/", ""}, {http.MethodGet, "/replays/", ""},
		{http.MethodGet, "/endpoints/", ""}, {http.MethodGet, "/sources/", ""},
		{http.MethodPost, "/events/", "/replay"}, {http.MethodPost, "/deliveries/", "/retry"},
	}
	f.Fuzz(func(t *testing.T, route uint8, id string, asTenant bool) {
		r := routes[int(route)%len(routes)]
		token := opToken
		if asTenant {
			token = acmeToken
		}
		var body []byte
		if r[0] == http.MethodPost {
			body = []byte(`{}`)
		}
		target := r[1] + url.PathEscape(id) + r[2]
		st, b := fa.call(t, r[0], target, token, body, "")
		fa.check(t, r[0], target, st, b, false)
		if asTenant && st < 300 && r[0] == http.MethodGet {
			var v struct {
				Tenant *string `json:"tenant"`
			}
			if err := json.Unmarshal(b, &v); err != nil || v.Tenant != nil && *v.Tenant != "acme" {
				t.Fatalf("%s %s as acme: %d %s", r[0], target, st, b)
			}
		}
	})
}

// ------------------------------------------------- endpoint bodies, read back

// FuzzEndpointViewRoundTrip fuzzes the parsed fields of POST /endpoints
// (url, timeout and retry durations, numbers, a header, a glob): an
// endpoint the API creates reads back as created, its durations are the
// ones sent, and its settable fields sent back as a PATCH are accepted and
// change nothing (a client's read-modify-write must not be refused).
func FuzzEndpointViewRoundTrip(f *testing.F) {
	fa := newFuzzAdmin(f)
	f.Add("http://127.0.0.1:9/hook", "10s", "1s", "1m", "1h", 2.0, 0.2, 30, "X-Team", "billing", "invoice.*", 0.0, 10)
	f.Add("https://x.test/h?sig=1", "1h", "1ns", "1ns", "720h", 1.0, 0.0, 1, "X-A", "", "[a-c]?", 1e-300, 1)
	f.Add("http://x.test/", "1.5h", "1h0m0.000000001s", "2h", "2h", 1e300, 1.0, 1<<30, "x", "\t", "*", 1e300, 1<<30)
	f.Add("http://x.test/", "1\u00b5s", "1us", "-0s", "+1h", 1.5, 0.5, 5, "X-B", "é", `\*`, 5.0, 3)
	f.Fuzz(func(t *testing.T, u, timeout, initial, maxInterval, maxElapsed string, mult, rnd float64, attempts int,
		hName, hValue, glob string, rate float64, inFlight int) {
		for _, s := range []string{u, timeout, initial, maxInterval, maxElapsed, hName, hValue, glob} {
			if !utf8.ValidString(s) {
				return // JSON carries valid UTF-8 only: Marshal would replace the bytes
			}
		}
		in := map[string]any{
			"url": u, "timeout": timeout, "headers": map[string]string{hName: hValue}, "event_types": []string{glob},
			"rate_limit": rate, "max_in_flight": inFlight,
			"retry": map[string]any{"initial_interval": initial, "max_interval": maxInterval, "max_elapsed": maxElapsed,
				"multiplier": mult, "randomization": rnd, "max_attempts": attempts},
		}
		body, err := json.Marshal(in)
		if err != nil {
			return // NaN or Inf: not JSON
		}
		st, b := fa.call(t, http.MethodPost, "/endpoints", opToken, body, "")
		fa.check(t, http.MethodPost, "/endpoints", st, b, false)
		if st != 201 {
			return
		}
		var v admin.Endpoint
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("201 %s: %v", b, err)
		}
		for _, c := range [][2]string{{timeout, v.Timeout}, {initial, v.Retry.InitialInterval}, {maxInterval, v.Retry.MaxInterval}, {maxElapsed, v.Retry.MaxElapsed}} {
			sent, err1 := time.ParseDuration(c[0])
			shown, err2 := time.ParseDuration(c[1])
			if err1 != nil || err2 != nil || sent != shown {
				t.Fatalf("sent duration %q, shown %q", c[0], c[1])
			}
		}
		if v.URL != u || v.Headers[hName] != hValue || len(v.EventTypes) != 1 || v.EventTypes[0] != glob ||
			v.RateLimit != rate || v.MaxInFlight != inFlight || v.Retry.Multiplier != mult || v.Retry.Randomization != rnd || v.Retry.MaxAttempts != attempts {
			t.Fatalf("sent %s, shown %s", body, b)
		}
		st, got := fa.call(t, http.MethodGet, "/endpoints/"+v.ID, opToken, nil, "")
		if st != 200 || !bytes.Equal(got, b) {
			t.Fatalf("created %s, read back %d %s", b, st, got)
		}
		back, _ := json.Marshal(map[string]any{
			"id": v.ID, "tenant": v.Tenant, "url": v.URL, "secret": v.Secret, "sources": v.Sources, "event_types": v.EventTypes,
			"headers": v.Headers, "timeout": v.Timeout, "max_in_flight": v.MaxInFlight, "rate_limit": v.RateLimit,
			"retry": v.Retry, "disabled": v.Disabled,
		})
		st, got = fa.call(t, http.MethodPatch, "/endpoints/"+v.ID, opToken, back, "")
		var after admin.Endpoint
		if st != 200 || json.Unmarshal(got, &after) != nil {
			t.Fatalf("endpoint %s sent back as a PATCH (%s): %d %s", b, back, st, got)
		}
		after.UpdatedAt = v.UpdatedAt
		if fmt.Sprint(after) != fmt.Sprint(v) {
			t.Fatalf("PATCH with its own view changed the endpoint:\n%+v\n%+v", v, after)
		}
	})
}
