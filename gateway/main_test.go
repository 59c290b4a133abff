package gateway

import (
	"testing"

	"go.uber.org/goleak"
)

// fasthttpGoroutines are fasthttp's own background goroutines, which a
// stopped gateway leaves behind for a while.
var fasthttpGoroutines = []goleak.Option{
	// fasthttp's worker-pool cleaner sleeps out its interval after the
	// server has shut down; it holds nothing and exits on its own.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	// fasthttp refreshes a process-wide Date header once a second.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, fasthttpGoroutines...) }
