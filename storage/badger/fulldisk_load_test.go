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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const fullDiskLoadEnv = "HOOKGATE_FULLDISK_LOAD_DIR"

// TestFullDiskLoadChild is not a test: it is the store process of
// TestFullDiskUnderConcurrentLoad: eight writers of 192 KiB events, who
// keep trying for 8 s after the first refusal (clients retry a 503), then
// a close. With _OPEN_ONLY set: open, a write a second for 10 s, close.
func TestFullDiskLoadChild(t *testing.T) {
	dir := os.Getenv(fullDiskLoadEnv)
	if dir == "" {
		t.Skip("helper process")
	}
	db, err := Open(dir, Options{})
	if err != nil {
		fmt.Printf("OPEN ERROR: %v\n", err)
		return
	}
	fmt.Println("OPENED")
	if os.Getenv(fullDiskLoadEnv+"_OPEN_ONLY") != "" {
		for i := range 10 {
			req := acceptRequest(fmt.Sprintf("after-%d", i), "{}", time.Now().UTC(), "ep")
			_, err := db.Accept(context.Background(), req)
			fmt.Printf("WRITE %d: %v\n", i, err)
			time.Sleep(time.Second) // a soak window for Badger's compactors, not a synchronisation
		}
		if err := db.Close(); err != nil {
			fmt.Printf("CLOSE ERROR: %v\n", err)
		}
		fmt.Println("CLOSED")
		return
	}
	var n, refused atomic.Int64
	var firstRefusal atomic.Pointer[time.Time]
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			pad := make([]byte, 144<<10)
			for i := 0; ; i++ {
				if p := firstRefusal.Load(); p != nil && time.Since(*p) > 8*time.Second {
					return
				}
				_, _ = rand.Read(pad)
				id := fmt.Sprintf("fill-%d-%d", w, i)
				body := fmt.Sprintf(`{"id":%q,"pad":%q}`, id, base64.StdEncoding.EncodeToString(pad))
				req := acceptRequest(id, body, time.Now().UTC(), "ep")
				req.BodyHash = sha256.Sum256([]byte(body))
				if _, err := db.Accept(context.Background(), req); err != nil {
					if !errors.Is(err, ErrNoSpace) {
						fmt.Printf("ERROR: %v\n", err)
						return
					}
					refused.Add(1)
					now := time.Now()
					if firstRefusal.CompareAndSwap(nil, &now) {
						fmt.Printf("FIRST REFUSAL after %d events: %v\n", n.Load(), err)
					}
					time.Sleep(20 * time.Millisecond) // a client's retry pace
					continue
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("ACCEPTED %d REFUSED %d\n", n.Load(), refused.Load())
	if err := db.Close(); err != nil {
		fmt.Printf("CLOSE ERROR: %v\n", err)
	}
	fmt.Println("CLOSED")
}

// TestFullDiskUnderConcurrentLoad: under eight concurrent writers level 0
// holds many tables (Badger stalls writes only at 15), and a level-0
// compaction rewrites them with the overlapping tables of the base level.
// A fixed reserve of eight memtables let that compaction's table build (a
// memory map) die of SIGBUS on a 3 GiB disk, in 4 runs of 6; the reserve
// now follows the levels' sizes. It takes minutes, so it runs only with
// HOOKGATE_LONG_TESTS=1 (RELIABILITY.md, "Reproduce").
func TestFullDiskUnderConcurrentLoad(t *testing.T) {
	if os.Getenv("HOOKGATE_LONG_TESTS") == "" {
		t.Skip("takes minutes; set HOOKGATE_LONG_TESTS=1")
	}
	const size = "3g"
	dir := mountTmpfs(t, size)
	run := func(openOnly bool) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFullDiskLoadChild$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), fullDiskLoadEnv+"="+dir)
		if openOnly {
			cmd.Env = append(cmd.Env, fullDiskLoadEnv+"_OPEN_ONLY=1")
		}
		out, err := cmd.CombinedOutput()
		text := string(out)
		if i := strings.Index(text, "goroutine "); i > 0 {
			if j := strings.Index(text[i:], "created by"); j > 0 {
				text = text[:i+j] // the crashing goroutine's stack
			}
		}
		return text, err
	}
	out, err := run(false)
	if err != nil || !strings.Contains(out, "CLOSED") {
		again, _ := run(true)
		free, _ := freeSpace(dir)
		t.Fatalf("filling a %s disk with concurrent writers: the store process ended with %v (want writes refused with ErrNoSpace and a clean close)\n%s\nthen, %d bytes free, a restart:\n%s", size, err, out, free, again)
	}
}
