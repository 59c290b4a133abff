package console_test

import (
	"io"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"hookgate/gateway/console"
)

func get(t *testing.T, app *fiber.App, path string) (int, map[string]string, string) {
	t.Helper()
	resp, err := app.Test(httptest.NewRequest("GET", path, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	h := map[string]string{}
	for k := range resp.Header {
		h[k] = resp.Header.Get(k)
	}
	return resp.StatusCode, h, string(body)
}

// TestHeaders: every file is sent with the strict CSP and friends;
// index.html is never cached; /ui redirects; an unknown path is the index.
func TestHeaders(t *testing.T) {
	app := fiber.New()
	console.Mount(app)
	st, h, _ := get(t, app, "/ui")
	if st != fiber.StatusMovedPermanently || h["Location"] != "/ui/" {
		t.Fatalf("/ui: %d, Location %q", st, h["Location"])
	}
	for _, c := range []struct{ path, ctype, cache, contains string }{
		{"/ui/", "text/html; charset=utf-8", "no-store", `<script type="module" src="/ui/app.js">`},
		{"/ui/index.html", "text/html; charset=utf-8", "no-store", "<main"},
		{"/ui/events/evt_1", "text/html; charset=utf-8", "no-store", "<main"},
		{"/ui/nope.js", "text/html; charset=utf-8", "no-store", "<main"},
		{"/ui/app.js", "text/javascript; charset=utf-8", "no-cache", "import"},
		{"/ui/style.css", "text/css; charset=utf-8", "no-cache", "body"},
		{"/ui/vendor/uplot/uPlot.esm.js", "text/javascript; charset=utf-8", "no-cache", "uPlot"},
		{"/ui/vendor/uplot/LICENSE", "text/plain; charset=utf-8", "no-cache", "MIT"},
	} {
		st, h, body := get(t, app, c.path)
		if st != 200 || h["Content-Type"] != c.ctype || h["Cache-Control"] != c.cache || !strings.Contains(body, c.contains) {
			t.Errorf("%s: %d %q cache %q, body has %q: %v", c.path, st, h["Content-Type"], h["Cache-Control"], c.contains, strings.Contains(body, c.contains))
		}
		if h["Content-Security-Policy"] != console.ContentSecurityPolicy || h["X-Content-Type-Options"] != "nosniff" || h["Referrer-Policy"] != "no-referrer" {
			t.Errorf("%s: CSP %q, nosniff %q, referrer %q", c.path, h["Content-Security-Policy"], h["X-Content-Type-Options"], h["Referrer-Policy"])
		}
	}
	if want := "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"; console.ContentSecurityPolicy != want {
		t.Errorf("CSP %q", console.ContentSecurityPolicy)
	}
}

// TestNoMarkupFromStrings: the console's own scripts never turn a string
// into markup or code (a line may say why it is safe: "// allowed: …"),
// and index.html has no inline script or style (the
// CSP would refuse them). Vendored files are checked when updated
// (static/vendor/README.md).
func TestNoMarkupFromStrings(t *testing.T) {
	sinks := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*['"](on|style|href|src)|\.cssText|srcdoc|createContextualFragment|DOMParser`)
	err := filepath.WalkDir("static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(p, filepath.Join("static", "vendor")) {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch filepath.Ext(p) {
		case ".js":
			for i, line := range strings.Split(string(b), "\n") {
				if sinks.MatchString(line) && !strings.Contains(line, "// allowed: ") {
					t.Errorf("%s:%d: %s", p, i+1, strings.TrimSpace(line))
				}
			}
		case ".html":
			s := string(b)
			if regexp.MustCompile(`<script(?:\s+type="module")?>|<style|\sstyle=|\son[a-z]+=|javascript:`).MatchString(s) {
				t.Errorf("%s has an inline script, style or handler", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
