package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"hookgate/gateway/admin"
	"hookgate/gateway/problem"
)

// Fuzz targets for the admin API's parsers of outside input: list filters,
// pagination cursors and limits, time windows, and the JSON bodies of
// every POST and PATCH. They drive the real admin app (its middlewares,
// handlers and a real Badger store) through Fiber's app.Test, without
// listeners or the dispatcher. Whatever comes in, the answer is not a 5xx
// and nothing panics; an error is a problem+json, a list is a list.

// fuzzAdmin is a gateway whose admin app the fuzz targets call.
type fuzzAdmin struct {
	g        *Gateway
	evt, dlv string // an event and a delivery that exist
	cursor   string // a next_cursor the API returned
}

// newFuzzAdmin builds a gateway on testConfig (one endpoint, not started:
// nothing is ever sent) and publishes a few events.
func newFuzzAdmin(f *testing.F) *fuzzAdmin {
	f.Helper()
	fa := &fuzzAdmin{g: newIdleGateway(f, "endpoints:\n  - {id: ep, tenant: acme, url: \"http://127.0.0.1:9/never\"}\n")}
	for i := range 3 {
		st, b := fa.call(f, http.MethodPost, "/events", opToken, fmt.Appendf(nil, `{"source":"open","type":"t.%d","payload":{"id":"seed-%d"}}`, i, i), "")
		if st != 202 {
			f.Fatalf("seed event: %d %s", st, b)
		}
		var ans jsonMap
		_ = json.Unmarshal(b, &ans)
		fa.evt, _ = ans["id"].(string)
	}
	st, b := fa.call(f, http.MethodGet, "/deliveries?limit=1", opToken, nil, "")
	var l admin.List[admin.Delivery]
	if err := json.Unmarshal(b, &l); st != 200 || err != nil || len(l.Data) != 1 || l.NextCursor == "" {
		f.Fatalf("seed deliveries: %d %s", st, b)
	}
	fa.dlv, fa.cursor = l.Data[0].ID, l.NextCursor
	return fa
}

// call sends one request to the admin app and returns its status and body.
func (fa *fuzzAdmin) call(tb testing.TB, method, target, token string, body []byte, idemKey string) (int, []byte) {
	tb.Helper()
	resp := fa.do(tb, method, target, token, body, idemKey)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, b
}

func (fa *fuzzAdmin) do(tb testing.TB, method, target, token string, body []byte, idemKey string) *http.Response {
	tb.Helper()
	u := &url.URL{Path: "/api/v1" + target}
	if p, q, ok := strings.Cut(target, "?"); ok {
		u.Path, u.RawQuery = "/api/v1"+p, q
	}
	req, err := http.NewRequest(method, "http://admin"+u.String(), bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := fa.g.admin.Test(req, -1)
	var tooLong *fasthttp.ErrSmallBuffer
	if t, isT := tb.(*testing.T); isT && errors.As(err, &tooLong) {
		// A request head longer than the server's read buffer: a listening
		// server answers it 431 problem+json (TestBadInputMalformedRequests
		// checks that on both listeners); app.Test reports an error instead.
		t.Skip("request head over the admin read buffer")
	}
	if err != nil {
		tb.Fatalf("%s %s: %v", method, target, err)
	}
	return resp
}

// check fails on a 5xx, on an error that is not problem+json, and on a
// 200 list that is not a list.
func (fa *fuzzAdmin) check(t *testing.T, method, target string, st int, b []byte, list bool) {
	t.Helper()
	switch {
	case st >= 500:
		t.Fatalf("%s %s: %d %s", method, target, st, b)
	case st >= 400:
		var p problem.Details
		if err := json.Unmarshal(b, &p); err != nil || p.Status != st || !strings.HasPrefix(p.Type, problem.Base) {
			t.Fatalf("%s %s: %d with a body that is not a problem: %s", method, target, st, b)
		}
	case st == 200 && list:
		var l admin.List[json.RawMessage]
		if err := json.Unmarshal(b, &l); err != nil || l.Data == nil {
			t.Fatalf("%s %s: a list answer that is not a list: %s", method, target, b)
		}
	}
}

// listRoutes are the admin lists and the filters each takes.
var listRoutes = []string{"/events", "/deliveries", "/endpoints", "/sources"}

// FuzzAdminListFilters fuzzes the list routes' query: limit, cursor,
// since/until and the per-list filters, as a tenant or as the operator;
// and the same values as a raw query string. A returned next_cursor is
// followed once.
func FuzzAdminListFilters(f *testing.F) {
	fa := newFuzzAdmin(f)
	now := time.Now().UTC()
	f.Add(uint8(0), "10", fa.cursor, now.Add(-time.Hour).Format(time.RFC3339), now.Format(time.RFC3339Nano), "open", "t.1", false)
	f.Add(uint8(1), "1", fa.cursor, "", "", "ep", "failed", true)
	f.Add(uint8(1), "0", "!!!", "2026-13-45T99:99:99Z", "yesterday", "", "bogus", false)
	f.Add(uint8(0), "-1", base64.RawURLEncoding.EncodeToString([]byte("evt_zzzz")), now.Format(time.RFC3339), now.Add(-time.Hour).Format(time.RFC3339), "", "", true)
	f.Add(uint8(2), "1001", base64.RawURLEncoding.EncodeToString([]byte("../../x")), "", "", "", "", false)
	f.Add(uint8(3), "99999999999999999999", "AAAA", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "\x00", "\xff", true)
	f.Add(uint8(1), "1", fa.dlv, "", "", fa.evt, "pending", false)
	f.Fuzz(func(t *testing.T, route uint8, limit, cursor, since, until, filter1, filter2 string, asTenant bool) {
		path := listRoutes[int(route)%len(listRoutes)]
		q := url.Values{}
		for k, v := range map[string]string{"limit": limit, "cursor": cursor, "since": since, "until": until} {
			if v != "" {
				q.Set(k, v)
			}
		}
		switch path {
		case "/events":
			q.Set("source", filter1)
			q.Set("type", filter2)
		case "/deliveries":
			q.Set("endpoint", filter1)
			q.Set("status", filter2)
			q.Set("event", filter1)
		}
		token := opToken
		if asTenant {
			token = acmeToken
		}
		targets := []string{path + "?" + q.Encode(), path + "?" + rawQuery(limit, cursor, since, until, filter1)}
		for _, target := range targets {
			st, b := fa.call(t, http.MethodGet, target, token, nil, "")
			fa.check(t, http.MethodGet, target, st, b, true)
			var l admin.List[json.RawMessage]
			if st == 200 && json.Unmarshal(b, &l) == nil && l.NextCursor != "" {
				q.Set("cursor", l.NextCursor)
				next := path + "?" + q.Encode()
				st, b := fa.call(t, http.MethodGet, next, token, nil, "")
				fa.check(t, http.MethodGet, next, st, b, true)
			}
		}
	})
}

// rawQuery joins fuzzed values into a query string as a careless client
// would, without escaping: only the bytes that cannot be on a request
// line at all are dropped.
func rawQuery(parts ...string) string {
	s := "limit=" + parts[0] + "&cursor=" + parts[1] + "&since=" + parts[2] + "&until=" + parts[3] + "&" + parts[4]
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == 0x7f || r == '#' || r > 0x7e {
			return -1
		}
		return r
	}, s)
}

// bodyRoutes are the admin routes that take a JSON body.
func (fa *fuzzAdmin) bodyRoutes() [][2]string {
	return [][2]string{
		{http.MethodPost, "/events"},
		{http.MethodPost, "/events/" + fa.evt + "/replay"},
		{http.MethodPost, "/replays"},
		{http.MethodPost, "/endpoints"},
		{http.MethodPatch, "/endpoints/ep"},
		{http.MethodPost, "/endpoints/ep/rotate-secret"},
		{http.MethodPost, "/sources"},
		{http.MethodPatch, "/sources/open"},
		{http.MethodPost, "/deliveries/" + fa.dlv + "/retry"},
	}
}

// FuzzAdminBodies fuzzes the JSON body (and the Idempotency-Key) of every
// admin route that takes one, as a tenant or as the operator. The same
// request sent again with the same key is answered the same way.
func FuzzAdminBodies(f *testing.F) {
	fa := newFuzzAdmin(f)
	for _, s := range []struct {
		route uint8
		body  string
	}{
		{0, `{"source":"open","type":"t","payload":{"id":"f1"},"event_id":"x"}`},
		{0, `{"source":"open","payload":null}`},
		{1, `{"endpoints":["ep","ep","nope"]}`},
		{2, `{"source":"open","status":"failed","since":"2026-01-01T00:00:00Z","until":"2025-01-01T00:00:00Z"}`},
		{3, `{"id":"f-ep","url":"http://127.0.0.1:9/x","retry":{"initial_interval":"1ms","max_interval":"1ns","multiplier":0.5},"headers":{"X-A":"b\r\nc"}}`},
		{3, `{"url":"http://[::1","timeout":"-5s","max_in_flight":-1,"rate_limit":1e308,"secret":"whsec_!!"}`},
		{4, `{"disabled":true,"event_types":["[","**"],"sources":["other"]}`},
		{5, `{"grace":"999999999999h","secret":"whsec_AAAA"}`},
		{6, `{"id":"f-src","verify":{"scheme":"hmac","secrets":[""],"algorithm":"md5","encoding":"hex"},"event_id":"json:/a/~2","event_type":"header:"}`},
		{7, `{"verify":{"scheme":"none"},"event_id":"query:+json:"}`},
		{8, ``},
		{0, strings.Repeat("[", 20000)},
		{3, `{"id":"` + strings.Repeat("a", 70) + `","url":"https://x.test/"}`},
		{2, `{"source":"open"} {"source":"open"}`},
		{6, "{\"id\":\"\xff\",\"verify\":{\"scheme\":\"none\"}}"},
	} {
		f.Add(s.route, []byte(s.body), "", false)
		f.Add(s.route, []byte(s.body), "key-1", true)
	}
	routes := fa.bodyRoutes()
	f.Fuzz(func(t *testing.T, route uint8, body []byte, idemKey string, asTenant bool) {
		r := routes[int(route)%len(routes)]
		token := opToken
		if asTenant {
			token = acmeToken
		}
		idemKey = strings.Map(func(r rune) rune {
			if r < ' ' || r == 0x7f {
				return -1
			}
			return r
		}, idemKey)
		st, b := fa.call(t, r[0], r[1], token, body, idemKey)
		fa.check(t, r[0], r[1], st, b, false)
		if idemKey == "" || st >= 500 {
			return
		}
		resp := fa.do(t, r[0], r[1], token, body, idemKey)
		again, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		fa.check(t, r[0], r[1], resp.StatusCode, again, false)
		if r[0] == http.MethodPost && resp.StatusCode != 409 && (resp.StatusCode != st || !bytes.Equal(again, b)) {
			t.Fatalf("%s %s with Idempotency-Key %q: %d %s, then %d %s; want the same answer", r[0], r[1], idemKey, st, b, resp.StatusCode, again)
		}
	})
}
