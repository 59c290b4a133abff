package gateway

import (
	"slices"
	"strings"
	"testing"
)

// FuzzReadFraming: readFraming counts the Content-Length and Host lines,
// lists the Transfer-Encoding codings and finds the malformed line of a
// header block built from the input, whatever else it holds and however
// its names are cased; any raw bytes are read without a panic.
func FuzzReadFraming(f *testing.F) {
	f.Add(uint8(1), "", "X-Note: Content-Length: 5", []byte("Host: x\r\n"))
	f.Add(uint8(2), "gzip, chunked", "content-length : 3", []byte("Transfer-Encoding: chunked\r\n"))
	f.Add(uint8(0), " Chunked ,, x-custom ", "", []byte("\r\n:\r\nContent-Length"))
	f.Fuzz(func(t *testing.T, cls uint8, te, other string, raw []byte) {
		_ = readFraming(raw)
		te, other = headerSafe(te), headerSafe(other)
		var b strings.Builder
		b.WriteString("Host: x\r\n")
		for i := range int(cls % 4) {
			b.WriteString([]string{"Content-Length: 5\r\n", "content-length:5\r\n"}[i%2])
		}
		var want []string
		if te != "" {
			b.WriteString("TRANSFER-encoding: " + te + "\r\n")
			for c := range strings.SplitSeq(te, ",") {
				if c = strings.TrimSpace(c); c != "" {
					want = append(want, strings.ToLower(c))
				}
			}
		}
		// Another line may be a framing header itself, or malformed: no
		// colon, an empty name, blanks around the name (a folded line,
		// space before the colon).
		extraCL, extraTE, malformed, hosts := 0, []string(nil), false, 1
		name, value, ok := strings.Cut(other, ":")
		blank := func(c byte) bool { return c == ' ' || c == '\t' }
		switch {
		case other == "":
		case !ok || name == "" || blank(name[0]) || blank(name[len(name)-1]):
			malformed = true
		default:
			switch {
			case strings.EqualFold(name, "Content-Length"):
				extraCL = 1
			case strings.EqualFold(name, "Host"):
				hosts++
			case strings.EqualFold(name, "Transfer-Encoding"):
				for c := range strings.SplitSeq(value, ",") {
					if c = strings.TrimSpace(c); c != "" {
						extraTE = append(extraTE, strings.ToLower(c))
					}
				}
			}
		}
		b.WriteString(other + "\r\n")
		got := readFraming([]byte(b.String()))
		if got.malformed != malformed || got.hosts != hosts {
			t.Fatalf("%q: malformed %v, %d Host lines; want %v, %d", b.String(), got.malformed, got.hosts, malformed, hosts)
		}
		if got.contentLengths != int(cls%4)+extraCL {
			t.Fatalf("%q: %d Content-Length lines, want %d", b.String(), got.contentLengths, int(cls%4)+extraCL)
		}
		if want = append(want, extraTE...); !slices.Equal(got.codings, want) {
			t.Fatalf("%q: codings %q, want %q", b.String(), got.codings, want)
		}
	})
}
