package outbound

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Transport settings of the delivery client. Idle connections are kept per
// host so that a busy endpoint reuses its connections across attempts. The
// per-host bound must not be below an endpoint's max_in_flight, or every
// attempt beyond it closes its connection and the next one dials again
// (measured: 15% of the gateway's CPU went to dialing at max_in_flight 128).
const (
	dialTimeout         = 10 * time.Second
	keepAlive           = 30 * time.Second
	maxIdleConns        = 4096
	maxIdleConnsPerHost = 1024
	idleConnTimeout     = 90 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
	// maxResponseHeader bounds a receiver's answer headers (Go's default
	// is 10 MiB, held per attempt in flight).
	maxResponseHeader = 1 << 20
)

// BlockedAddressError is the dial error for a destination address the
// gateway refuses to connect to (SSRF protection). The address is the one
// DNS returned, so the operator sees why a hostname was refused.
type BlockedAddressError struct {
	Addr   netip.Addr
	Reason string
}

// Error names the address and why it is refused, and the setting that
// would allow it.
func (e *BlockedAddressError) Error() string {
	return fmt.Sprintf("refused to connect to %s: %s address (delivery.allow_private_targets is false)", e.Addr, e.Reason)
}

// blockedPrefix is one range of addresses an endpoint may not reach.
type blockedPrefix struct {
	prefix netip.Prefix
	reason string
}

// blockedPrefixes are the ranges refused at dial time: everything that is
// not a public unicast address. IPv4-mapped IPv6 addresses are unmapped
// before the lookup, and the IPv4 embedded in NAT64 and 6to4 addresses is
// checked as well, so no IPv6 spelling reaches a refused IPv4 range.
var blockedPrefixes = []blockedPrefix{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "private NAT64"},
	{netip.MustParsePrefix("100::/64"), "discard"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// Prefixes of IPv6 addresses that embed an IPv4 address which, once
// translated by a gateway, would be the real destination.
var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052: v4 in the last 32 bits
	sixToFour   = netip.MustParsePrefix("2002::/16")    // RFC 3056: v4 in bits 16-47
	teredo      = netip.MustParsePrefix("2001::/32")    // RFC 4380: server v4 in bits 32-63, client v4 (inverted) in the last 32
)

// Blocked reports whether addr must not be dialled unless private targets
// are allowed, and why (loopback, private, link-local, ...).
func Blocked(addr netip.Addr) (reason string, blocked bool) {
	addr = addr.Unmap().WithZone("")
	if !addr.IsValid() {
		return "invalid", true
	}
	for _, b := range blockedPrefixes {
		if b.prefix.Contains(addr) {
			return b.reason, true
		}
	}
	for _, v4 := range embeddedIPv4(addr) {
		if reason, blocked := Blocked(v4); blocked {
			return reason, true
		}
	}
	return "", false
}

// embeddedIPv4 returns the IPv4 addresses inside a NAT64, 6to4 or Teredo
// address (a Teredo address carries its server's and, bit-inverted, its
// client's).
func embeddedIPv4(addr netip.Addr) []netip.Addr {
	if !addr.Is6() {
		return nil
	}
	b := addr.As16()
	switch {
	case nat64Prefix.Contains(addr):
		return []netip.Addr{netip.AddrFrom4([4]byte(b[12:16]))}
	case sixToFour.Contains(addr):
		return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
	case teredo.Contains(addr):
		return []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])),
			netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})}
	}
	return nil
}

// ASCIIHost is the host net/http dials for a URL's host: an
// internationalized name mapped by IDNA's lookup profile (full-width
// digits and dots, "ⓛocalhost", upper case), as net/http maps it; the host
// as given when it is ASCII or does not map.
func ASCIIHost(host string) string {
	for i := 0; i < len(host); i++ {
		if host[i] >= utf8.RuneSelf {
			if a, err := idna.Lookup.ToASCII(host); err == nil {
				return a
			}
			return host
		}
	}
	return host
}

// guardDial is a net.Dialer Control function: it runs after DNS resolution,
// on the exact address about to be connected, so a hostname that resolves
// (or re-resolves, DNS rebinding) to a refused address cannot get through.
func guardDial(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("refused to connect to %q: not an IP address", address)
	}
	if reason, blocked := Blocked(ap.Addr()); blocked {
		return &BlockedAddressError{Addr: ap.Addr(), Reason: reason}
	}
	return nil
}

// NewClient returns the HTTP client deliveries are sent with. It never uses
// a proxy from the environment (a proxy would dial on our behalf and bypass
// the address guard), never follows redirects (a 3xx is a failed attempt:
// following it would let an endpoint bounce deliveries elsewhere), keeps
// connections alive and pools them per host. Unless allowPrivate is true,
// it refuses to connect to loopback, private, link-local, CGNAT, multicast
// and unspecified addresses. Per-attempt timeouts come from the request
// context, not from the client.
func NewClient(allowPrivate bool) *http.Client {
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive}
	if !allowPrivate {
		dialer.Control = guardDial
	}
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           maxIdleConns,
		MaxIdleConnsPerHost:    maxIdleConnsPerHost,
		IdleConnTimeout:        idleConnTimeout,
		TLSHandshakeTimeout:    tlsHandshakeTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHeader,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
	}
	return &http.Client{
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// BlockedURL reports why every delivery to raw would be refused at dial
// time when private targets are not allowed: its host is a literal
// loopback, private, link-local or otherwise blocked address, or localhost
// (RFC 6761). A hostname is resolved, and checked, only when dialled.
func BlockedURL(raw string) (reason string, blocked bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", false
	}
	// The host net/http dials: "１２７．０．０．１" and "ⓛocalhost" map to
	// 127.0.0.1 and localhost.
	host := strings.ToLower(strings.TrimSuffix(ASCIIHost(u.Hostname()), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return "loopback", true
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return "", false
	}
	return Blocked(addr)
}
