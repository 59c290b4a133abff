package testsupport

import (
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed atomic.Bool
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed.Store(true)
	panic("fatal")
}

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	WaitFor(t, 10*time.Second, "the third look", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("looked %d times, want 3", n)
	}
}

func TestWaitForFailsAfterTheDeadline(t *testing.T) {
	f := &fakeT{TB: t}
	func() {
		defer func() { _ = recover() }()
		WaitFor(f, 20*time.Millisecond, "never", func() bool { return false })
	}()
	if !f.failed.Load() {
		t.Fatal("WaitFor returned for a condition that never held")
	}
}
