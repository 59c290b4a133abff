// Package console serves the web console (SPEC section 7): static files
// embedded in the binary, under /ui/ on the admin listener. The files need
// no token; every datum they show comes from the admin API, which checks
// the token the operator signs in with. docs/console.md describes the pages.
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"
)

//go:embed static
var embedded embed.FS

// ContentSecurityPolicy is sent with every file: scripts and styles only
// from the gateway's own files (no inline ones), and API calls only to it.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// file is one embedded file, read once at start.
type file struct {
	body        []byte
	contentType string
	etag        string
}

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".md":   "text/plain; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
	".ico":  "image/x-icon",
}

// load reads every embedded file under static/ into a map keyed by its
// path below static/ ("index.html", "pages/events.js").
func load() map[string]file {
	files := map[string]file{}
	root, err := fs.Sub(embedded, "static")
	if err != nil {
		panic(err)
	}
	err = fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(root, p)
		if err != nil {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			ct = "text/plain; charset=utf-8" // LICENSE and the like
		}
		sum := sha256.Sum256(body)
		files[p] = file{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		panic(err)
	}
	return files
}

// Mount registers GET (and HEAD) /ui and /ui/* on r.
func Mount(r fiber.Router) {
	h := Handler()
	r.Get("/ui/*", h)
	r.Get("/ui", h) // the redirect to /ui/, where routing is not strict
}

// Handler serves the embedded files; it expects the path below /ui/ in
// the "*" route parameter. An unknown path serves index.html, whose
// script routes by the URL's hash.
func Handler() fiber.Handler {
	files := load()
	index := files["index.html"]
	return func(c *fiber.Ctx) error {
		if c.Path() == "/ui" {
			return c.Redirect("/ui/", fiber.StatusMovedPermanently)
		}
		p := strings.TrimPrefix(path.Clean("/"+c.Params("*")), "/")
		f, ok := files[p]
		if !ok || p == "" {
			f, p = index, "index.html"
		}
		h := &c.Response().Header
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set(fiber.HeaderContentType, f.contentType)
		if p == "index.html" {
			h.Set(fiber.HeaderCacheControl, "no-store")
		} else {
			// Revalidated every time: a new binary's files are never
			// mixed with an old one's.
			h.Set(fiber.HeaderCacheControl, "no-cache")
			h.Set(fiber.HeaderETag, f.etag)
			if string(c.Request().Header.Peek(fiber.HeaderIfNoneMatch)) == f.etag {
				return c.SendStatus(fiber.StatusNotModified)
			}
		}
		return c.Send(f.body)
	}
}
