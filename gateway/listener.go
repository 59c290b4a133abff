package gateway

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// trackingListener remembers the connections it accepted and that are
// still open, so that a shutdown whose grace period runs out can close
// them: fasthttp's own shutdown only closes idle connections, and a
// client stalled halfway through a request would otherwise hold its
// connection (and the process) until the read timeout.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

func newTrackingListener(ln net.Listener) *trackingListener {
	return &trackingListener{Listener: ln, conns: make(map[*trackedConn]struct{})}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[tc] = struct{}{}
	l.mu.Unlock()
	return tc, nil
}

// closeAll closes every connection still open and returns how many.
func (l *trackingListener) closeAll() int {
	l.mu.Lock()
	open := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		open = append(open, c)
	}
	l.mu.Unlock()
	for _, c := range open {
		c.cut.Store(true)
		_ = c.Close()
	}
	return len(open)
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
	// linger is set when the server refused a request whose body it did
	// not read (over max_body, or unparsable): see Close.
	linger atomic.Bool
	// cut is set when closeAll closed the connection under a handler
	// still running: see SetDeadline.
	cut atomic.Bool
}

// SetDeadline, SetReadDeadline and SetWriteDeadline ignore the error of a
// connection closeAll cut: fasthttp panics when it cannot set a deadline
// ("BUG: error in SetWriteDeadline"), and the handler of an ingest that
// outlived the grace period returned to just that, which killed the
// process before the store was closed. Its write then fails as any write
// to a closed connection does.
func (c *trackedConn) SetDeadline(t time.Time) error {
	return c.ignoreIfCut(c.Conn.SetDeadline(t))
}

func (c *trackedConn) SetReadDeadline(t time.Time) error {
	return c.ignoreIfCut(c.Conn.SetReadDeadline(t))
}

func (c *trackedConn) SetWriteDeadline(t time.Time) error {
	return c.ignoreIfCut(c.Conn.SetWriteDeadline(t))
}

func (c *trackedConn) ignoreIfCut(err error) error {
	if err != nil && c.cut.Load() {
		return nil
	}
	return err
}

// Lingering close bounds: how long, and how much of an unread body, Close
// waits for and throws away before it closes the socket.
const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 64 << 20
)

// Close closes the connection. After a refusal with the request's body
// unread, closing at once makes the kernel answer the client's next bytes
// with a reset, which can reach the client before it has read the answer:
// a provider posting 8 MiB against a 1 MiB max_body saw "connection reset"
// instead of the 413. So such a connection is closed as net/http and
// nginx do: the write side first (the client gets the answer and an end
// of stream), then what the client still sends is read and dropped for a
// moment, then the socket is closed.
func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		if c.linger.Load() {
			c.lingerBeforeClose()
		}
	})
	return c.Conn.Close()
}

func (c *trackedConn) lingerBeforeClose() {
	tcp, ok := c.Conn.(*net.TCPConn)
	if !ok || tcp.CloseWrite() != nil {
		return
	}
	if tcp.SetReadDeadline(time.Now().Add(lingerTime)) != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, tcp, lingerBytes)
}

// lingerOnClose marks the connection of a request refused before its body
// was read (see trackedConn.Close).
func lingerOnClose(c net.Conn) {
	if tc, ok := c.(*trackedConn); ok {
		tc.linger.Store(true)
	}
}
