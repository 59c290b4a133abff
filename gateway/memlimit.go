package gateway

import (
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// defaultMemoryLimit is the Go soft memory limit when GOMEMLIMIT is unset,
// unless the process's cgroup allows less (memoryLimit).
const defaultMemoryLimit = 1 << 30

// memoryLimit is the soft memory limit to set when GOMEMLIMIT is unset:
// defaultMemoryLimit, or three quarters of the memory limit of the cgroup
// the process runs in when that is smaller. A container given 512 MiB was
// otherwise OOM-killed before the GC began to work harder. The kernel
// enforces every ancestor's limit too (a systemd slice's MemoryMax=), so
// each is read. procCgroup is /proc/self/cgroup's content and root where
// cgroups are mounted (/sys/fs/cgroup); cgroup v2 and v1 are read.
func memoryLimit(procCgroup, root string) int64 {
	limit := int64(defaultMemoryLimit)
	consider := func(b []byte) {
		// "max" (v2) is no limit; v1 writes a huge number instead.
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
			limit = min(limit, n/4*3)
		}
	}
	for line := range strings.Lines(procCgroup) {
		// "0::/path" (v2) or "4:memory:/path" (v1).
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = root, "memory.max"
		case hasController(parts[1], "memory"):
			dir, file = filepath.Join(root, "memory"), "memory.limit_in_bytes"
			// v1 sums up the ancestors' limits in memory.stat.
			if b, err := os.ReadFile(filepath.Join(dir, parts[2], "memory.stat")); err == nil {
				for l := range strings.Lines(string(b)) {
					if v, ok := strings.CutPrefix(l, "hierarchical_memory_limit "); ok {
						consider([]byte(v))
					}
				}
			}
		default:
			continue
		}
		// From the process's cgroup up to the mount's root. In a cgroup
		// namespace the path is "/" and the root is the process's own.
		for p := path.Clean("/" + parts[2]); ; p = path.Dir(p) {
			if b, err := os.ReadFile(filepath.Join(dir, p, file)); err == nil {
				consider(b)
			}
			if p == "/" {
				break
			}
		}
	}
	return limit
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
