package admin

import (
	"bytes"
	_ "embed"

	"github.com/gofiber/fiber/v2"
)

// openapiDoc is the OpenAPI 3.1 description of the admin API. It is kept
// by hand beside the handlers; TestAdminOpenAPIMatchesRoutes fails when a
// route is missing from it or it lists a route that does not exist.
//
//go:embed openapi.json
var openapiDoc []byte

// openapi is GET /api/v1/openapi.json; it needs no token (it describes the
// API, it holds no data).
func (a *API) openapi(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(openapiDoc)
}

// OpenAPI returns the OpenAPI document the API serves.
func OpenAPI() []byte { return bytes.Clone(openapiDoc) }
