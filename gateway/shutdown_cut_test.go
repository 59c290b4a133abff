package gateway

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

// gatedIngestStore is the real store whose Ingest, once armed, waits
// until the gate opens: an ingest still running when the grace period
// ends (a disk that stalls its fsync for a few seconds).
type gatedIngestStore struct {
	storage.Store
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
	left    atomic.Int32
}

func (s *gatedIngestStore) Ingest(ctx context.Context, req *storage.IngestRequest) (storage.IngestResult, error) {
	if s.armed.Load() {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		<-s.gate
		defer s.left.Add(1)
	}
	return s.Store.Ingest(ctx, req)
}

// README: once the grace period is over "connections still open are
// closed ... those ingests were not acknowledged", then the store is
// flushed and the process exits 0. The handler of such an ingest is still
// running; when it returns, fasthttp sets the write deadline on the
// connection Shutdown closed under it and panics ("BUG: error in
// SetWriteDeadline"), which kills the process (exit 2, store maybe not
// closed). The test binary dies the same way.
func TestHandlerOutlivingTheGraceDoesNotCrashTheProcess(t *testing.T) {
	ss := &gatedIngestStore{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	g := startGateway(t, gwOptions{grace: 300 * time.Millisecond, wrapStore: func(s storage.Store) storage.Store {
		ss.Store = s
		return ss
	}})
	var once atomic.Bool
	open := func() {
		if once.CompareAndSwap(false, true) {
			close(ss.gate)
		}
	}
	t.Cleanup(open)
	ss.armed.Store(true)
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		resp, err := http.Post("http://"+g.PublicAddr()+"/ingest/open", "application/json", strings.NewReader(`{"id":"slow-1","type":"a"}`))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("ingest answered %d %s", resp.StatusCode, b)
		}
	}()
	select {
	case <-ss.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the ingest never reached Ingest")
	}
	t0 := time.Now()
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Shutdown took %v (grace 300ms)", time.Since(t0).Round(time.Millisecond))
	<-clientDone
	open() // the stalled disk comes back: the cut handler returns
	waitFor(t, 10*time.Second, "the cut handler to return", func() bool { return ss.left.Load() > 0 })
	// The handler's goroutine goes on into fasthttp's serveConn; give it a
	// bounded chance to do so (polled: the fasthttp worker is gone when
	// no goroutine serves a connection any more).
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if !strings.Contains(allStacks(), "fasthttp.(*Server).serveConn") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("a connection's serveConn is still running 2s after its handler returned")
}

func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
