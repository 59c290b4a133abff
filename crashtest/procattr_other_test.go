//go:build !linux

package crashtest

import "syscall"

// childAttr has nothing to add outside Linux: the test's cleanup kills the
// gateway.
func childAttr() *syscall.SysProcAttr { return nil }
