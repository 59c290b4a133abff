package gateway

import (
	"os"
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
// otherwise OOM-killed before the GC began to work harder. procCgroup is
// /proc/self/cgroup's content and root where cgroups are mounted
// (/sys/fs/cgroup); both cgroup v2 and v1 are read.
func memoryLimit(procCgroup, root string) int64 {
	limit := int64(defaultMemoryLimit)
	for line := range strings.Lines(procCgroup) {
		// "0::/path" (v2) or "4:memory:/path" (v1).
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var files []string
		switch {
		case parts[0] == "0" && parts[1] == "":
			files = []string{filepath.Join(root, parts[2], "memory.max"), filepath.Join(root, "memory.max")}
		case hasController(parts[1], "memory"):
			dir := filepath.Join(root, "memory")
			files = []string{filepath.Join(dir, parts[2], "memory.limit_in_bytes"), filepath.Join(dir, "memory.limit_in_bytes")}
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			// "max" (v2) is no limit; v1 writes a huge number instead.
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
				limit = min(limit, n/4*3)
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
