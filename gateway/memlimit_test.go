package gateway

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMemoryLimitFollowsTheCgroup(t *testing.T) {
	write := func(t *testing.T, root, rel, content string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const mib = 1 << 20
	for _, tc := range []struct {
		name, cgroup string
		files        map[string]string
		want         int64
	}{
		{"no cgroup files", "0::/\n", nil, defaultMemoryLimit},
		{"v2 container, 512 MiB", "0::/\n", map[string]string{"memory.max": "536870912\n"}, 384 * mib},
		{"v2 container, no limit", "0::/\n", map[string]string{"memory.max": "max\n"}, defaultMemoryLimit},
		{"v2 container, 8 GiB", "0::/\n", map[string]string{"memory.max": "8589934592\n"}, defaultMemoryLimit},
		{"v2 systemd service, 256 MiB", "0::/system.slice/hookgate.service\n",
			map[string]string{"system.slice/hookgate.service/memory.max": "268435456\n"}, 192 * mib},
		{"v1, 512 MiB", "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n",
			map[string]string{"memory/docker/abc/memory.limit_in_bytes": "536870912\n"}, 384 * mib},
		{"v1 namespaced, no limit", "9:name=systemd:/\n4:memory:/process_api/x\n0::/\n",
			map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, defaultMemoryLimit},
		{"v1 memory in a joined list", "4:cpu,memory:/a\n",
			map[string]string{"memory/a/memory.limit_in_bytes": "268435456"}, 192 * mib},
		{"garbage", "0::/\n", map[string]string{"memory.max": "lots\n"}, defaultMemoryLimit},
		// The kernel enforces every ancestor's limit: a service in a slice
		// with MemoryMax=256M, its own memory.max "max".
		{"v2, the slice's limit", "0::/limited.slice/hookgate.service\n", map[string]string{
			"limited.slice/memory.max":                  "268435456\n",
			"limited.slice/hookgate.service/memory.max": "max\n",
		}, 192 * mib},
		{"v1, the parent's limit in memory.stat", "4:memory:/a/b\n", map[string]string{
			"memory/a/b/memory.limit_in_bytes": "9223372036854771712\n",
			"memory/a/b/memory.stat":           "cache 0\nhierarchical_memory_limit 268435456\nrss 0\n",
		}, 192 * mib},
		{"v1, the parent's limit file", "4:memory:/a/b\n", map[string]string{
			"memory/a/memory.limit_in_bytes": "536870912\n",
		}, 384 * mib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for rel, content := range tc.files {
				write(t, root, rel, content)
			}
			if got := memoryLimit(tc.cgroup, root); got != tc.want {
				t.Fatalf("memoryLimit = %d MiB, want %d MiB", got/mib, tc.want/mib)
			}
		})
	}
}
