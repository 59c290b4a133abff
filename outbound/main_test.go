package outbound

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// goroutine the dispatcher starts must be stopped by Stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
