package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/gateway/config"
	"hookgate/internal/testsupport"
)

// dbProxy stands between a gateway and its database, so that a test can
// take the database away (every connection cut, new ones refused) and
// bring it back on the same address, as an outage or a restart of the
// server does.
type dbProxy struct {
	t      *testing.T
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
}

func newDBProxy(t *testing.T, target string) *dbProxy {
	p := &dbProxy{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.down)
	return p
}

func (p *dbProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
}

// down cuts every connection and refuses new ones.
func (p *dbProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// up takes connections again, on the same address.
func (p *dbProxy) up() {
	var ln net.Listener
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ln, err = net.Listen("tcp", p.addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	p.serve(ln)
}

// With its database away a gateway answers 503 with Retry-After (never a
// 2xx), /readyz is 503, and both come back by themselves once the
// database is back; every event it acknowledged is delivered.
func TestPostgresOutageIs503ThenRecovers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dsn := testDSN(t, dir)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newDBProxy(t, u.Host)
	u.Host = proxy.addr
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	proxied := u.String()

	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{dir: dir, postgres: true,
		extra:  fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q}\n", rcv.url("hook")),
		config: func(c *config.Config) { c.Storage.Postgres.DSN = proxied }})
	acked := map[string]bool{}
	post := func(id string) (int, http.Header) {
		st, hdr, _ := g.post("open", fmt.Appendf(nil, `{"id":%q,"type":"t"}`, id), nil)
		if st == http.StatusAccepted {
			acked[id] = true
		}
		return st, hdr
	}
	if st, _ := post("before"); st != http.StatusAccepted {
		t.Fatalf("ingest with the database up: %d", st)
	}
	readyz := func() int {
		resp, err := http.Get("http://" + g.AdminAddr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}

	proxy.down()
	for i := range 5 {
		st, hdr := post(fmt.Sprint("during-", i))
		if st == http.StatusAccepted {
			t.Fatalf("a 202 while the database is away")
		}
		if st != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
			t.Fatalf("ingest with the database away: %d, Retry-After %q; want 503 with Retry-After", st, hdr.Get("Retry-After"))
		}
	}
	if st := readyz(); st != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with the database away: %d, want 503", st)
	}

	proxy.up()
	testsupport.WaitFor(t, 30*time.Second, "ingest to work again", func() bool {
		st, _ := post(fmt.Sprint("after-", time.Now().UnixNano()))
		return st == http.StatusAccepted
	})
	if st := readyz(); st != http.StatusOK {
		t.Fatalf("/readyz with the database back: %d, want 200", st)
	}
	testsupport.WaitFor(t, 30*time.Second, "every acknowledged event delivered", func() bool {
		got := map[string]bool{}
		for _, r := range rcv.all() {
			if i := strings.Index(string(r.body), `"id":"`); i >= 0 {
				rest := string(r.body)[i+6:]
				got[rest[:strings.IndexByte(rest, '"')]] = true
			}
		}
		for id := range acked {
			if !got[id] {
				return false
			}
		}
		return true
	})
}
