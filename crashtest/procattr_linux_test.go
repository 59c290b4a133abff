package crashtest

import "syscall"

// childAttr makes the kernel SIGKILL the gateway if the test process dies
// first, so that a crashed or interrupted test never leaves one behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
