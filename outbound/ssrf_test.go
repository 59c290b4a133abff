package outbound

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"
)

func TestBlocked(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		blocked bool
	}{
		{"127.0.0.1", true},
		{"127.255.0.9", true},
		{"::1", true},
		{"10.1.2.3", true},
		{"172.16.0.1", true},
		{"172.31.255.255", true},
		{"172.32.0.1", false},
		{"192.168.1.1", true},
		{"fc00::1", true},
		{"fd12:3456::1", true},
		{"169.254.169.254", true}, // cloud metadata
		{"fe80::1", true},
		{"fe80::1%eth0", true},
		{"100.64.0.1", true},
		{"100.127.255.255", true},
		{"100.128.0.1", false},
		{"224.0.0.1", true},
		{"ff02::1", true},
		{"0.0.0.0", true},
		{"::", true},
		{"255.255.255.255", true},
		{"::ffff:127.0.0.1", true}, // IPv4-mapped
		{"::ffff:10.0.0.1", true},
		{"::ffff:169.254.169.254", true},
		{"::ffff:8.8.8.8", false},
		{"::127.0.0.1", true},       // IPv4-compatible (deprecated)
		{"64:ff9b::a00:1", true},    // NAT64 of 10.0.0.1
		{"64:ff9b::808:808", false}, // NAT64 of 8.8.8.8
		{"2002:7f00:1::1", true},    // 6to4 of 127.0.0.1
		{"2002:808:808::1", false},  // 6to4 of 8.8.8.8
		{"8.8.8.8", false},
		{"93.184.216.34", false},
		{"2606:4700:4700::1111", false},
		{"2001:4860:4860::8888", false},
	} {
		reason, blocked := Blocked(netip.MustParseAddr(tc.addr))
		if blocked != tc.blocked {
			t.Errorf("Blocked(%s) = %v (%s), want %v", tc.addr, blocked, reason, tc.blocked)
		}
		if blocked && reason == "" {
			t.Errorf("Blocked(%s) gives no reason", tc.addr)
		}
	}
}

func TestNewClientRefusesPrivateAfterResolution(t *testing.T) {
	rc := newReceiver(t, nil)
	_, port, _ := net.SplitHostPort(rc.Listener.Addr().String())
	guarded := NewClient(false)
	for _, host := range []string{"localhost", "127.0.0.1", "[::ffff:127.0.0.1]"} {
		url := "http://" + net.JoinHostPort(host, port) + "/"
		if host[0] == '[' {
			url = "http://" + host + ":" + port + "/"
		}
		_, err := post(guarded, url)
		var blocked *BlockedAddressError
		if !errors.As(err, &blocked) {
			t.Errorf("POST %s: err = %v, want a BlockedAddressError", url, err)
		}
	}
	if n := rc.count(); n != 0 {
		t.Fatalf("the guarded client reached the server %d times", n)
	}
	resp, err := post(NewClient(true), "http://"+net.JoinHostPort("localhost", port)+"/")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("allowPrivate client: %v, %v", resp, err)
	}
	if rc.count() != 1 {
		t.Fatal("allowPrivate client did not reach the server")
	}
}

func TestNewClientNeverFollowsRedirects(t *testing.T) {
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/hook" {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		}
	})
	resp, err := post(NewClient(true), rc.URL+"/hook")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTemporaryRedirect || rc.count() != 1 {
		t.Fatalf("status %d after %d requests; want 307 and no follow-up", resp.StatusCode, rc.count())
	}
}

func TestNewClientUsesNoProxy(t *testing.T) {
	tr, ok := NewClient(false).Transport.(*http.Transport)
	if !ok || tr.Proxy != nil {
		t.Fatal("the delivery transport must not use a proxy: it would dial past the address guard")
	}
}

func post(c *http.Client, url string) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	c.CloseIdleConnections()
	return resp, nil
}

// Teredo (RFC 4380, 2001::/32) embeds the IPv4 address of the client
// (obfuscated: XORed with all ones) in its last 32 bits, and of its server
// in bits 32-63. A host with a Teredo interface, or a relay on the way,
// sends the traffic for such an address, in UDP, to the embedded client
// address: the same kind of IPv6 spelling of an IPv4 destination as 6to4,
// which Blocked already looks into. An endpoint resolving to the Teredo
// form of 127.0.0.1, 10.0.0.1 or 169.254.169.254 must be refused like the
// address itself; one whose embedded addresses are public stays allowed.
func TestTeredoEmbeddingAPrivateIPv4IsBlocked(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		blocked bool
	}{
		// server 65.55.158.118, cone, port 80 (ffaf), client as commented
		{"2001:0:4137:9e76:8000:ffaf:80ff:fffe", true},  // client 127.0.0.1
		{"2001:0:4137:9e76:8000:ffaf:f5ff:fffe", true},  // client 10.0.0.1
		{"2001:0:4137:9e76:8000:ffaf:5601:5601", true},  // client 169.254.169.254
		{"2001:0:a00:1:8000:ffaf:f7f7:f7f7", true},      // server 10.0.0.1
		{"2001:0:4137:9e76:8000:ffaf:f7f7:f7f7", false}, // client 8.8.8.8: public
	} {
		addr := netip.MustParseAddr(tc.addr)
		reason, blocked := Blocked(addr)
		if blocked != tc.blocked {
			t.Errorf("Blocked(%s) = %v (%q), want %v", tc.addr, blocked, reason, tc.blocked)
		}
		if !tc.blocked {
			continue
		}
		err := guardDial("tcp6", netip.AddrPortFrom(addr, 80).String(), nil)
		var b *BlockedAddressError
		if !errors.As(err, &b) {
			t.Errorf("dial guard let %s through: %v", tc.addr, err)
		}
	}
}
