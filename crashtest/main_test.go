package crashtest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: load
// clients, receivers, process waiters and HTTP connections must all be
// stopped by the test that started them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
