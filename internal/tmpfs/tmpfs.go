// Package tmpfs gives tests a small file system of their own, to fill: the
// full-disk tests of the store and of the gateway.
package tmpfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// Mount mounts a tmpfs of size (mount's syntax: "300m") on a fresh
// directory, unmounted at the end of the test, or skips the test where
// that is not possible (it needs root on Linux).
func Mount(t testing.TB, size string) string {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux to mount a small tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s); the full-disk tests need CAP_SYS_ADMIN", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// Resize changes the size of the tmpfs Mount mounted on dir.
func Resize(t testing.TB, dir, size string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s: %v: %s", dir, err, out)
	}
}

// Fill creates the file path and allocates it so that leave bytes stay
// free on the file system that holds it.
func Fill(t testing.TB, path string, leave int64) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free <= leave {
		t.Fatalf("fill %s: %d bytes free, cannot leave %d", path, free, leave)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, free-leave); err != nil {
		t.Fatalf("fill %s: %v", path, err)
	}
}
