package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"hookgate/gateway/problem"
)

// Tokens of testConfig.
const (
	opToken   = "operator-token"
	acmeToken = "acme-token"
)

// api sends an admin API request as token (none when ""), with body as
// JSON (a string or []byte is sent as is; nil sends none) and extra
// headers as name, value pairs.
func (h *gw) api(method, path, token string, body any, hdr ...string) (int, http.Header, []byte) {
	h.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		r = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, "http://"+h.AdminAddr()+"/api/v1"+path, r)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(h.t, req)
}

// must answers the request as api does and fails the test unless the
// status is want; it decodes the body into a T.
func must[T any](t *testing.T, want int) func(st int, hdr http.Header, body []byte) T {
	return func(st int, hdr http.Header, body []byte) T {
		t.Helper()
		if st != want {
			t.Fatalf("status %d, want %d: %s", st, want, body)
		}
		var v T
		if len(body) > 0 {
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatalf("decode %s: %v", body, err)
			}
		}
		return v
	}
}

// wantProblem checks a problem+json answer: its status and, when field
// is not "-", the field it names.
func wantProblem(t *testing.T, what string, status int, field string) func(st int, hdr http.Header, body []byte) problem.Details {
	return func(st int, hdr http.Header, body []byte) problem.Details {
		t.Helper()
		if st != status {
			t.Fatalf("%s: status %d, want %d: %s", what, st, status, body)
		}
		p := decodeProblem(t, hdr, body)
		if p.Status != status || !strings.HasPrefix(p.Type, problem.Base) || p.Title == "" {
			t.Fatalf("%s: problem %+v", what, p)
		}
		if field != "-" && p.Field != field {
			t.Fatalf("%s: problem names field %q, want %q (%s)", what, p.Field, field, body)
		}
		return p
	}
}

// encodeTestCursor makes a cursor the way the store does (base64url of
// the last id), to show that one list's cursor is refused by another.
func encodeTestCursor(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// jsonMap is a decoded JSON object.
type jsonMap = map[string]any
