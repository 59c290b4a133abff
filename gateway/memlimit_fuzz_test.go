package gateway

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzMemoryLimit: whatever /proc/self/cgroup and the cgroup files hold,
// memoryLimit does not panic and answers a soft limit in [0, 1 GiB]; for
// the kernel's own line formats (v2 "0::/x", v1 "N:memory:/x") it is the
// default or three quarters of the smallest positive limit among the files
// the kernel enforces: v2 memory.max of the cgroup and each ancestor; v1
// memory.limit_in_bytes of the cgroup and each ancestor, and
// hierarchical_memory_limit in the cgroup's memory.stat.
func FuzzMemoryLimit(f *testing.F) {
	f.Add("0::/x\n", "536870912\n", "max\n", "", "")
	f.Add("0::/x\n", "max\n", "268435456", "", "")
	f.Add("4:memory:/x\n3:cpu:/x\n", "", "", "9223372036854771712\n", "cache 0\nhierarchical_memory_limit 268435456\n")
	f.Add("4:cpu,memory:/x\n", "", "", "-1\n", "hierarchical_memory_limit\n")
	f.Add("0::/x\n", "+4\n", "3", "", "")
	f.Add("0::/../../x (deleted)\n1:memory:\n::\n", "0", "9223372036854775807", "1", "hierarchical_memory_limit 1")
	f.Fuzz(func(t *testing.T, cg, rootMax, xMax, v1Limit, v1Stat string) {
		root := t.TempDir()
		for rel, content := range map[string]string{
			"memory.max":                     rootMax,
			"x/memory.max":                   xMax,
			"memory/x/memory.limit_in_bytes": v1Limit,
			"memory/x/memory.stat":           v1Stat,
		} {
			p := filepath.Join(root, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got := memoryLimit(cg, root)
		if got < 0 || got > defaultMemoryLimit {
			t.Fatalf("memoryLimit(%q) = %d, outside [0, 1 GiB]", cg, got)
		}
		want := int64(defaultMemoryLimit)
		limit := func(s string) {
			if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil && n > 0 && n/4*3 < want {
				want = n / 4 * 3
			}
		}
		switch cg {
		case "0::/x\n":
			limit(rootMax)
			limit(xMax)
		case "4:memory:/x\n":
			limit(v1Limit)
			for _, l := range strings.Split(v1Stat, "\n") {
				if v, ok := strings.CutPrefix(l, "hierarchical_memory_limit "); ok {
					limit(v)
				}
			}
		default:
			return
		}
		if got != want {
			t.Fatalf("memoryLimit(%q) with memory.max %q, x/memory.max %q, v1 limit %q, v1 stat %q = %d, want %d",
				cg, rootMax, xMax, v1Limit, v1Stat, got, want)
		}
	})
}
