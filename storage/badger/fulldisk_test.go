package badger

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hookgate/internal/tmpfs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fullDiskEnv names the store directory of TestFullDiskChild, the child
// process of the full-disk tests: whatever Badger does when the disk
// fills (a SIGBUS in a memory-mapped write) cannot take the test process
// down with it. fullDiskEnv+"_MODE" says what the child does.
const fullDiskEnv = "HOOKGATE_FULLDISK_DIR"

// TestFullDiskChild is not a test: it is the store process of the
// full-disk tests. It opens the store in the directory named by
// fullDiskEnv with the engine's default options (32 MiB memtables), then
// by mode:
//   - fill: writes 256 KiB events one after the other until one is refused;
//   - load: eight writers of 192 KiB events, who keep trying for 8 s after
//     the first refusal (clients retry a 503);
//   - soak: a small write a second for 10 s;
//   - anything else: nothing;
//
// and closes it.
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
	switch os.Getenv(fullDiskEnv + "_MODE") {
	case "fill":
		fillDisk(db, 1, 192<<10, false)
	case "load":
		fillDisk(db, 8, 144<<10, true)
	case "soak":
		for i := range 10 {
			_, err := db.Ingest(context.Background(), acceptRequest(fmt.Sprintf("after-%d", i), "{}", time.Now().UTC(), "ep"))
			fmt.Printf("WRITE %d: %v\n", i, err)
			time.Sleep(time.Second) // a soak window for Badger's compactors, not a synchronisation
		}
	}
	if err := db.Close(); err != nil {
		fmt.Printf("CLOSE ERROR: %v\n", err)
	}
	fmt.Println("CLOSED")
}

// fillDisk has writers write events with a random pad of padSize bytes
// (base64: 4/3 of it on the wire) until a write is refused; with keepOn,
// they go on trying for 8 s after the first refusal.
func fillDisk(db *DB, writers, padSize int, keepOn bool) {
	var n, refused atomic.Int64
	var firstRefusal atomic.Pointer[time.Time]
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			pad := make([]byte, padSize)
			for i := 0; ; i++ {
				if p := firstRefusal.Load(); p != nil && (!keepOn || time.Since(*p) > 8*time.Second) {
					return
				}
				_, _ = rand.Read(pad)
				id := fmt.Sprintf("fill-%d-%d", w, i)
				body := fmt.Sprintf(`{"id":%q,"pad":%q}`, id, base64.StdEncoding.EncodeToString(pad))
				req := acceptRequest(id, body, time.Now().UTC(), "ep")
				req.BodyHash = sha256.Sum256([]byte(body))
				_, err := db.Ingest(context.Background(), req)
				switch {
				case err == nil:
					n.Add(1)
				case !errors.Is(err, ErrNoSpace):
					fmt.Printf("ERROR: %v\n", err)
					return
				default:
					refused.Add(1)
					now := time.Now()
					if firstRefusal.CompareAndSwap(nil, &now) {
						fmt.Printf("REFUSED after %d events: %v\n", n.Load(), err)
					}
					time.Sleep(20 * time.Millisecond) // a client's retry pace
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("ACCEPTED %d REFUSED %d\n", n.Load(), refused.Load())
}

// runFullDiskChild runs TestFullDiskChild on dir in mode and returns its
// output (of a crash, the stack of the goroutine that crashed).
func runFullDiskChild(t *testing.T, dir, mode string) (string, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestFullDiskChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), fullDiskEnv+"="+dir, fullDiskEnv+"_MODE="+mode)
	out, err := cmd.CombinedOutput()
	text := string(out)
	if i := strings.Index(text, "goroutine "); i > 0 {
		if j := strings.Index(text[i:], "created by"); j > 0 {
			text = text[:i+j]
		}
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
	dir := tmpfs.Mount(t, "320m") // room for a memtable's flush beyond the reserve
	out, err := runFullDiskChild(t, dir, "fill")
	if err != nil || !strings.Contains(out, "REFUSED") || !strings.Contains(out, ErrNoSpace.Error()) || !strings.Contains(out, "CLOSED") {
		t.Fatalf("filling a 320 MiB disk: the store process ended with %v; want writes refused with ErrNoSpace and a clean close\n%s", err, out)
	}
	if strings.Contains(out, "REFUSED after 0 events") {
		t.Fatalf("nothing was written: the disk was full from the start\n%s", out)
	}
	out, err = runFullDiskChild(t, dir, "open")
	if err != nil || !strings.Contains(out, "OPENED") || !strings.Contains(out, "CLOSED") {
		t.Fatalf("reopening on the full disk: %v\n%s", err, out)
	}
}

// TestOpenRefusesADiskTooFullToReplay: Open wants room for Badger to
// replay and flush its logs, and says so, rather than crash in the flush.
func TestOpenRefusesADiskTooFullToReplay(t *testing.T) {
	dir := tmpfs.Mount(t, "64m")
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
	dir := tmpfs.Mount(t, "200m")
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, "000999.sst")
	tmpfs.Fill(t, orphan, 64<<20)
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

// A provider's retry of an event the gateway acknowledged needs no write:
// SPEC section 3 answers it with the stored status and body. On a nearly
// full disk (writes refused with ErrNoSpace, the gateway's 503) such a
// retry must still get the stored answer. It does only while the
// process's table of recent keys remembers the key: after a restart (or
// once later keys evicted it) the retry goes to the writer, which refuses
// the whole batch for space before reading the dedupe record, and the
// provider is told 503 for an event that is stored, durable and delivered.
func TestRetryOfAStoredEventIsAnsweredOnANearlyFullDisk(t *testing.T) {
	dir := tmpfs.Mount(t, "160m")
	o := Options{MemTableSize: 4 << 20}
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().UTC()
	first := acceptRequest("evt_stored", `{"id":"evt_stored"}`, now, "ep")
	first.Response.Body = []byte(`{"id":"` + first.Event.ID + `","event_id":"evt_stored"}`)
	if _, err := db.Ingest(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, o) // a restart: the table of recent keys is empty
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })

	// Fill the disk to just above what control writes need: data writes
	// (new events) are refused from now on.
	free, _ := freeSpace(dir)
	keep := openNeed(o.MemTableSize) + 2<<20
	if free-keep <= 0 || keep >= db.reserve() {
		t.Fatalf("setup: %d bytes free, keep %d, reserve %d", free, keep, db.reserve())
	}
	tmpfs.Fill(t, filepath.Join(dir, "filler"), keep)
	if _, err := db.Ingest(ctx, acceptRequest("evt_new", `{"id":"evt_new"}`, time.Now().UTC(), "ep")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("setup: a new event on the nearly full disk: %v, want ErrNoSpace", err)
	}

	retry := acceptRequest("evt_stored", `{"id":"evt_stored"}`, time.Now().UTC(), "ep")
	res, err := db.Ingest(ctx, retry)
	if err != nil {
		t.Fatalf("the provider's retry of a stored event: %v; want the stored answer (nothing needs writing)", err)
	}
	if !res.Replayed || res.Response.Status != 202 || string(res.Response.Body) != string(first.Response.Body) {
		t.Fatalf("retry answered %+v (%s), want the stored %s", res, res.Response.Body, first.Response.Body)
	}
}
