package config

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes allocated while fn runs.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// headerKeys is "h0: v, h1: v, ..." (n flow-mapping entries).
func headerKeys(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "h%d: v, ", i)
	}
	return b.String()
}

// A mapping that merges itself: each level of the recursion counts one alias
// visit, but walks (and keeps a seen map of) every key of the mapping, so a
// 1 KB file costs maxAliasVisits x keys of work and memory before it stops.
func TestConfigSelfMergeIsBounded(t *testing.T) {
	y := withSources("endpoints:\n  - id: e1\n    url: https://a.example.com/\n    headers: &h {" + headerKeys(100) + "<<: *h}\n")
	var err error
	n := allocated(func() { _, err = parse(t, y, nil) })
	if err == nil {
		t.Fatal("a self-merging mapping was accepted")
	}
	if n > 64<<20 {
		t.Errorf("a %d-byte file made the decoder allocate %d MB (%v)", len(y), n>>20, err)
	}
}

// The same mapping merged many times into one: only the first merge decodes
// (and counts) values, the others walk every key for nothing, uncounted. The
// work grows with keys x merges, unbounded by maxAliasVisits.
func TestConfigRepeatedMergeIsBounded(t *testing.T) {
	const n = 2000
	y := withSources("endpoints:\n  - id: e1\n    url: https://a.example.com/\n    headers: &h {" + headerKeys(n) + "}\n" +
		"  - id: e2\n    url: https://a.example.com/\n    headers: {<<: [" + strings.Repeat("*h, ", n) + "]}\n")
	var err error
	a := allocated(func() { _, err = parse(t, y, nil) })
	if a > 64<<20 {
		t.Errorf("a %d KB file made the decoder allocate %d MB (err %v)", len(y)>>10, a>>20, err)
	}
}

// A merge key naming an anchored value that is no mapping: the error is at
// the merge key's line, not at the line where the anchor was defined (an
// unrelated entry).
func TestConfigMergeKindErrorLine(t *testing.T) {
	_, err := parse(t, withSources(`endpoints:
  - id: e1
    url: &u https://a.example.com/
  - <<: *u
    id: e2
    url: https://b.example.com/
`), nil)
	wantError(t, err, "endpoints[1]", 12, "a merge key (<<) takes a mapping or a list of mappings")
}
