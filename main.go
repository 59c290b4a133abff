// Command hookgate is a webhook ingestion and delivery gateway: it verifies
// and deduplicates inbound webhooks, stores each event durably, and delivers
// it to every subscribed endpoint with a stable Idempotency-Key.
//
//	hookgate [serve] [-config config.yaml]
//	hookgate check-config -config FILE
//	hookgate version
package main

import (
	_ "embed"
	"os"

	"hookgate/gateway"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

//go:embed config.yaml
var defaultConfig []byte

func main() {
	os.Exit(gateway.Main(os.Args[1:], gateway.Build{Version: version, DefaultConfig: defaultConfig}, os.Stdout, os.Stderr))
}
