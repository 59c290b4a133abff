package gateway

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"hookgate/storage"
)

// A Standard Webhooks source created through the admin API by an earlier
// build with its secret read from a file (a trailing newline) verified
// every request: base64 skips newlines. It still does. (A first version
// of the whitespace check refused such secrets when compiling stored
// sources, and a stored source that does not compile is left out of the
// registry: after the upgrade the source answered 404 to its provider.)
func TestStoredSourceWithNewlineInSecretStillIngestsAfterUpgrade(t *testing.T) {
	if _, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(testSecret+"\n", "whsec_")); err != nil {
		t.Fatalf("the earlier build's decoding refused the secret too: %v", err)
	}
	g := startGateway(t, gwOptions{})
	now := time.Now().UTC()
	src := storage.Source{ID: "swfile", Tenant: "acme", CreatedAt: now, UpdatedAt: now,
		Verify: storage.VerifyConfig{Scheme: "standard-webhooks", Secrets: []string{testSecret + "\n"}}}
	// As POST /sources of the earlier build stored it.
	if err := g.Store().PutSource(context.Background(), &src); err != nil {
		t.Fatal(err)
	}
	g = g.restart(gwOptions{})
	body := []byte(`{"type":"invoice.paid"}`)
	st, _, b := g.post("swfile", body, signSW("msg_upgrade", time.Now(), body))
	if st != 202 {
		t.Fatalf("ingest to a stored source that verified before the upgrade: %d %s; want 202", st, b)
	}
}
