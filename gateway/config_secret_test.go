package gateway

import (
	"fmt"
	"testing"
)

// An endpoint's secret: in config.yaml is applied at every start, so it
// undoes a rotate-secret through the API (README); an endpoint from
// config.yaml without one keeps the secret the gateway generated, rotated
// or not.
func TestConfigSecretAndAPIRotation(t *testing.T) {
	const configured = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	extra := fmt.Sprintf(`endpoints:
  - {id: fixed, tenant: acme, url: "http://receiver.test/f", secret: %q}
  - {id: kept, tenant: acme, url: "http://receiver.test/k"}
`, configured)
	g := startGateway(t, gwOptions{extra: extra})
	rotated := map[string]string{}
	for _, id := range []string{"fixed", "kept"} {
		ep := must[endpointView](t, 200)(g.api("POST", "/endpoints/"+id+"/rotate-secret", acmeToken, nil))
		rotated[id] = ep.Secret
	}
	if rotated["fixed"] == configured {
		t.Fatal("the rotation kept the configured secret")
	}
	g = g.restart(gwOptions{extra: extra})
	if s := must[endpointView](t, 200)(g.api("GET", "/endpoints/fixed", acmeToken, nil)).Secret; s != configured {
		t.Errorf("endpoint with secret: in config.yaml has %q after a restart, want the configured one", s)
	}
	if s := must[endpointView](t, 200)(g.api("GET", "/endpoints/kept", acmeToken, nil)).Secret; s != rotated["kept"] {
		t.Errorf("endpoint without secret: in config.yaml has %q after a restart, want the rotated %q", s, rotated["kept"])
	}
}
