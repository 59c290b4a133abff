package gateway

import (
	"testing"

	"go.uber.org/goleak"
)

// A shutdown right after Start, before the listeners' goroutines got to
// serve, must still stop both: fasthttp's Shutdown closes only listeners
// its Serve has registered, so a late Serve accepted forever (seen as a
// leaked admin accept loop in a loaded test run).
func TestShutdownRightAfterStartStopsBothListeners(t *testing.T) {
	defer goleak.VerifyNone(t, append(fasthttpGoroutines, goleak.IgnoreCurrent())...)
	dir := t.TempDir()
	for range 30 {
		g := startGateway(t, gwOptions{dir: dir})
		if err := g.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
}
