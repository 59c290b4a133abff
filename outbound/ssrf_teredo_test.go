package outbound

import (
	"errors"
	"net/netip"
	"testing"
)

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
