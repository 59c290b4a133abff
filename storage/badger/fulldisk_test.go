package badger

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fullDiskEnv names the store directory of fullDiskChild, the child
// process of the full-disk tests: whatever Badger does when the disk
// fills (a SIGBUS in a memory-mapped write) cannot take the test process
// down with it.
const fullDiskEnv = "HOOKGATE_FULLDISK_DIR"

// TestFullDiskChild is not a test: it is the store process of
// TestFullDiskRefusesWritesAndReopens. It fills the store in the
// directory named by fullDiskEnv with 256 KiB events, with the engine's
// default options (32 MiB memtables), until a write is refused, then closes
// it; or, with fullDiskEnv_OPEN_ONLY set, only opens and closes it.
func TestFullDiskChild(t *testing.T) {
	dir := os.Getenv(fullDiskEnv)
	if dir == "" {
		t.Skip("helper process of the full-disk tests; runs only when they start it")
	}
	db, err := Open(dir, Options{})
	if err != nil {
		fmt.Printf("OPEN ERROR: %v\n", err)
		return
	}
	fmt.Println("OPENED")
	if os.Getenv(fullDiskEnv+"_OPEN_ONLY") == "" {
		pad := make([]byte, 192<<10)
		now := time.Now().UTC()
		for i := range 1000 {
			_, _ = rand.Read(pad)
			body := fmt.Sprintf(`{"id":"fill-%d","pad":%q}`, i, base64.StdEncoding.EncodeToString(pad))
			req := acceptRequest(fmt.Sprintf("fill-%d", i), body, now.Add(time.Duration(i)*time.Millisecond), "ep")
			req.BodyHash = sha256.Sum256([]byte(body))
			if _, err := db.Accept(context.Background(), req); err != nil {
				fmt.Printf("REFUSED after %d events: %v\n", i, err)
				break
			}
		}
	}
	if err := db.Close(); err != nil {
		fmt.Printf("CLOSE ERROR: %v\n", err)
	}
	fmt.Println("CLOSED")
}

// mountTmpfs mounts a tmpfs of size on a fresh directory, unmounted at the
// end of the test.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux to mount a small tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s)", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// runFullDiskChild runs TestFullDiskChild on dir and returns its output.
func runFullDiskChild(t *testing.T, dir string, openOnly bool) (string, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestFullDiskChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), fullDiskEnv+"="+dir)
	if openOnly {
		cmd.Env = append(cmd.Env, fullDiskEnv+"_OPEN_ONLY=1")
	}
	out, err := cmd.CombinedOutput()
	text := string(out)
	if i := strings.Index(text, "goroutine "); i > 0 {
		text = text[:i] // a crash's stacks: the first lines say enough
	}
	return text, err
}

// TestFullDiskRefusesWritesAndReopens: filling a disk larger than a
// memtable ends with writes refused (ErrNoSpace, which the gateway answers
// 503), and the store closes and opens again on the full disk. Badger
// writes its tables through memory maps of sparse files: with a reserve of
// 8 MiB, the flush of a 32 MiB memtable was a SIGBUS that killed the
// process, and every restart on that disk again.
func TestFullDiskRefusesWritesAndReopens(t *testing.T) {
	dir := mountTmpfs(t, "320m") // room for a memtable's flush beyond the reserve
	out, err := runFullDiskChild(t, dir, false)
	if err != nil || !strings.Contains(out, "REFUSED") || !strings.Contains(out, ErrNoSpace.Error()) || !strings.Contains(out, "CLOSED") {
		t.Fatalf("filling a 320 MiB disk: the store process ended with %v; want writes refused with ErrNoSpace and a clean close\n%s", err, out)
	}
	if strings.Contains(out, "REFUSED after 0 events") {
		t.Fatalf("nothing was written: the disk was full from the start\n%s", out)
	}
	out, err = runFullDiskChild(t, dir, true)
	if err != nil || !strings.Contains(out, "OPENED") || !strings.Contains(out, "CLOSED") {
		t.Fatalf("reopening on the full disk: %v\n%s", err, out)
	}
}

// TestOpenRefusesADiskTooFullToReplay: Open wants room for Badger to
// replay and flush its logs, and says so, rather than crash in the flush.
func TestOpenRefusesADiskTooFullToReplay(t *testing.T) {
	dir := mountTmpfs(t, "64m")
	_, err := Open(dir, Options{})
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "make room") {
		t.Fatalf("Open on a 64 MiB disk: %v, want ErrNoSpace", err)
	}
	// Smaller memtables need less room.
	db, err := Open(dir, Options{MemTableSize: 4 << 20})
	if err != nil {
		t.Fatalf("Open with 4 MiB memtables on a 64 MiB disk: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenCountsTablesACrashLeftUnfinished: a process killed while Badger
// wrote a table (say by a full disk's SIGBUS) leaves a table file its
// manifest does not name, which may fill the disk. Badger deletes such
// files when it opens, so Open's free-space check counts them as free:
// else the store could never open again without a hand cleaning up.
func TestOpenCountsTablesACrashLeftUnfinished(t *testing.T) {
	dir := mountTmpfs(t, "200m")
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	free, _ := freeSpace(dir)
	orphan := filepath.Join(dir, "000999.sst")
	f, err := os.Create(orphan)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, free-64<<20); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if free, _ := freeSpace(dir); free >= openNeed(32<<20) {
		t.Fatalf("setup: %d bytes free", free)
	}
	db, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open with an unfinished table filling the disk: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("the unfinished table is still there: %v", err)
	}
}
