package gateway

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The commands and config.yaml as a user meets them (SPEC sections 1 and
// 2): settings that cannot work are config errors with their key and line,
// found by check-config, not failures at start.

// checkConfigOf runs `hookgate check-config -config <file>` (through Main, as
// the binary does) on yaml and returns the exit code and stderr.
func checkConfigOf(t *testing.T, yaml string) (int, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := Main([]string{"check-config", "-config", path}, Build{Version: "test"}, &out, &errOut)
	return code, errOut.String()
}

// Two listeners on one port with overlapping hosts can never both bind.
// The check compared the two strings only, so ":8081" and
// "127.0.0.1:8081" passed check-config and serve failed at start with
// "bind: address already in use", naming no key or line: the root
// config.yaml with HOOKGATE_LISTEN=:8081 got there (the admin listener's
// default is 127.0.0.1:8081). Listeners that can both bind still pass.
func TestConfigListenersThatCannotBothBindAreRefused(t *testing.T) {
	root, err := os.ReadFile("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseConfig(root, "config.yaml", env(map[string]string{"HOOKGATE_LISTEN": ":8081"}))
	if err == nil || !strings.Contains(err.Error(), "admin.listen") {
		t.Errorf("root config.yaml with HOOKGATE_LISTEN=:8081 (admin listener on its default 127.0.0.1:8081): %v; "+
			"want an error at admin.listen (serve fails to bind the second listener)", err)
	}
	for _, c := range []struct{ server, admin string }{
		{":8080", "127.0.0.1:8080"},
		{"0.0.0.0:9000", "127.0.0.1:9000"},
		{"127.0.0.1:9000", "localhost:9000"},
		{"[::]:9000", "[::1]:9000"},
	} {
		y := fmt.Sprintf("server: {listen: %q}\nadmin:\n  listen: %q\n  tokens: [{token: admin-token-0123456789}]\n", c.server, c.admin)
		code, stderr := checkConfigOf(t, y)
		if code != 1 || !strings.Contains(stderr, ":3: admin.listen: ") {
			t.Errorf("server.listen %q, admin.listen %q: check-config exit %d, stderr %q; want exit 1 and an error at line 3, admin.listen",
				c.server, c.admin, code, stderr)
		}
	}
	for _, c := range []struct{ server, admin string }{
		{":8080", "127.0.0.1:8081"},
		{"127.0.0.1:9000", "127.0.0.2:9000"},
		{":0", ":0"},
		{"my_service.internal:8080", "[fe80::1%eth0]:8081"},
	} {
		y := fmt.Sprintf("server: {listen: %q}\nadmin:\n  listen: %q\n  tokens: [{token: admin-token-0123456789}]\nsources: [{id: s, verify: {scheme: none}}]\n", c.server, c.admin)
		if code, stderr := checkConfigOf(t, y); code != 0 {
			t.Errorf("server.listen %q, admin.listen %q: check-config exit %d, stderr %q; want OK", c.server, c.admin, code, stderr)
		}
	}
}

// A listen host that is neither an IP address nor a host name ("bad
// host", "example..com") is a config error; it passed check-config and
// failed at start with "no such host". Whether a name resolves is still
// the environment's, checked at start.
func TestConfigListenHostThatCannotBeSpeltIsRefused(t *testing.T) {
	for _, listen := range []string{"bad host:8080", "example..com:8080", "-x-:8080"} {
		y := fmt.Sprintf("server:\n  listen: %q\nadmin:\n  tokens: [{token: admin-token-0123456789}]\n", listen)
		code, stderr := checkConfigOf(t, y)
		if code != 1 || !strings.Contains(stderr, ":2: server.listen: ") {
			t.Errorf("server.listen %q: check-config exit %d, stderr %q; want exit 1 and an error at line 2, server.listen", listen, code, stderr)
		}
	}
}

// An admin token whose tenant is left blank (tenant:, ~ or null: what
// envsubst or Helm render for a missing value) fails closed: it kept the
// default "", the operator of every tenant, as an empty ${VAR} never
// does. tenant: "" (or no key) still names the operator.
func TestConfigBlankTokenTenantIsNotTheOperator(t *testing.T) {
	for _, blank := range []string{"", " ~", " null"} {
		y := "admin:\n  tokens:\n    - token: operator-token-0123456789\n    - token: acme-token-0123456789\n      tenant:" + blank + "\n"
		cfg, err := ParseConfig([]byte(y), "config.yaml", nil)
		if err == nil {
			t.Errorf("tenant:%s accepted: admin.tokens[1] is scoped to %q, the operator (all tenants)", blank, cfg.Admin.Tokens[1].Tenant)
			continue
		}
		if errs := configErrors(t, err); len(errs) != 1 || errs[0].Key != "admin.tokens[1].tenant" || errs[0].Line != 5 {
			t.Errorf("tenant:%s: %v; want one error at admin.tokens[1].tenant, line 5", blank, err)
		}
	}
	y := "admin:\n  tokens:\n    - token: operator-token-0123456789\n      tenant: \"\"\n"
	if cfg, err := ParseConfig([]byte(y), "config.yaml", nil); err != nil || cfg.Admin.Tokens[0].Tenant != "" {
		t.Errorf(`tenant: "": %v; want the operator`, err)
	}
}

// A config path that names something huge or endless (/dev/zero, a log
// file) is refused after 16 MiB instead of reading on until memory runs
// out.
func TestConfigFileIsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.yaml")
	if err := os.WriteFile(path, bytes.Repeat([]byte("# padding\n"), (maxConfigFile/10)+1), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(path)
	if err == nil || !strings.Contains(err.Error(), "larger than 16MiB") {
		t.Fatalf("a %d-byte config: %v, want refused as larger than 16MiB", maxConfigFile+10, err)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		if _, err := LoadConfig("/dev/zero"); err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Fatalf("/dev/zero: %v, want refused as too large", err)
		}
	}
}

// Go's net.Listen("tcp", "0.0.0.0:P") listens dual-stack ([::]:P, as
// gateway.go does for both listeners): it holds [::1]:P too, so
// "0.0.0.0:P" and "[::1]:P" are refused like any other pair that cannot
// both bind (checked against this host's own behaviour first).
func TestConfigIPv4WildcardClashesWithIPv6LoopbackOnOnePort(t *testing.T) {
	first, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skip(err)
	}
	defer first.Close()
	_, port, _ := net.SplitHostPort(first.Addr().String())
	second, err := net.Listen("tcp", "[::1]:"+port)
	if second != nil {
		second.Close()
	}
	if err == nil {
		t.Skip("this host listens IPv4-only on 0.0.0.0: both bind here")
	}
	// This machine cannot bind both; check-config must say so.
	y := fmt.Sprintf("server: {listen: %q}\nadmin:\n  listen: %q\n  tokens: [{token: admin-token-0123456789}]\nsources: [{id: s, verify: {scheme: none}}]\n",
		"0.0.0.0:"+port, "[::1]:"+port)
	code, stderr := checkConfigOf(t, y)
	if code != 1 || !strings.Contains(stderr, "admin.listen") {
		t.Errorf("server.listen 0.0.0.0:%s, admin.listen [::1]:%s: check-config exit %d, stderr %q; "+
			"want exit 1 at admin.listen (net.Listen of the second fails: %v)", port, port, code, stderr, err)
	}
}

// Asking for help is not a usage error: -h and -help of serve and
// check-config print the flags and exit 0, as "hookgate help" prints the
// commands; an unknown flag still exits 2.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"serve", "-help"}, {"check-config", "-h"}, {"help"}} {
		var out, errOut bytes.Buffer
		if code := Main(args, Build{Version: "test"}, &out, &errOut); code != 0 || !strings.Contains(out.String()+errOut.String(), "-config") {
			t.Errorf("hookgate %v: exit %d, output %q %q; want 0 and the flags", args, code, out.String(), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := Main([]string{"check-config", "-bogus"}, Build{Version: "test"}, &out, &errOut); code != 2 {
		t.Errorf("an unknown flag: exit %d, want 2", code)
	}
}
