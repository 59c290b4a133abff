package gateway

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestAdminOpenAPIMatchesRoutes: every /api/v1 route the admin app
// registers is in openapi.json, with its method, and the document lists
// no route that does not exist.
func TestAdminOpenAPIMatchesRoutes(t *testing.T) {
	g := startGateway(t, gwOptions{})
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Servers []struct{ URL string }                `json:"servers"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapiDoc, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") || len(doc.Servers) != 1 || doc.Servers[0].URL != "/api/v1" {
		t.Fatalf("openapi %q, servers %+v", doc.OpenAPI, doc.Servers)
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				documented[strings.ToUpper(method)+" /api/v1"+path] = true
			}
		}
	}
	param := regexp.MustCompile(`:([A-Za-z0-9_]+)`)
	registered := map[string]bool{}
	for _, r := range g.admin.GetRoutes(true) {
		if !strings.HasPrefix(r.Path, "/api/v1/") || r.Method == http.MethodHead {
			continue // Fiber adds HEAD to every GET
		}
		registered[r.Method+" "+param.ReplaceAllString(r.Path, "{$1}")] = true
	}
	if len(registered) < 20 {
		t.Fatalf("only %d routes registered: %v", len(registered), registered)
	}
	for r := range registered {
		if !documented[r] {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for r := range documented {
		if !registered[r] {
			t.Errorf("openapi.json lists %s, which is not a route", r)
		}
	}

	// Every $ref points at something, and the document is served as is.
	var tree any
	_ = json.Unmarshal(openapiDoc, &tree)
	var refs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok {
				refs = append(refs, r)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(tree)
	for _, ref := range refs {
		node := tree
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			m, _ := node.(map[string]any)
			node = m[part]
		}
		if node == nil {
			t.Errorf("dangling $ref %s", ref)
		}
	}
	st, hdr, b := g.api("GET", "/openapi.json", "", nil)
	if st != 200 || !slices.Equal(b, openapiDoc) || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /api/v1/openapi.json: %d %s", st, hdr.Get("Content-Type"))
	}
}
