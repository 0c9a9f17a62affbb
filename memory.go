package main

// How much memory the process may use (GOMEMLIMIT, its cgroup, the
// machine), read to size the local cache when LOCAL_CACHE_BYTES is not set.

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
)

// memoryFigure is how much memory the process may use, and what says so.
type memoryFigure struct {
	bytes  int64
	source string // GOMEMLIMIT, cgroup memory.max, cgroup memory.limit_in_bytes or MemTotal
}

// unlimitedCgroup: a cgroup v1 limit at or past this is "no limit" (v1
// writes the largest int64 rounded down to a page, not a word).
const unlimitedCgroup = 1 << 62

// processMemory finds how much memory the process may use: GOMEMLIMIT if
// it is set (goMemLimit is what debug.SetMemoryLimit(-1) returns,
// math.MaxInt64 when it is not), else the limit of the process's cgroup,
// if it is below the machine's memory (cgroup v2: the smallest memory.max
// from its own cgroup up to the root; v1: memory.limit_in_bytes), else
// the machine's MemTotal. readFile reads /proc and /sys (tests give files
// of their own). What the kernel writes there is read as strictly as any
// input: a file that is missing or does not parse is passed over. ok is
// false if nothing gave a figure.
func processMemory(goMemLimit int64, readFile func(string) ([]byte, error)) (memoryFigure, bool) {
	if goMemLimit > 0 && goMemLimit < math.MaxInt64 {
		return memoryFigure{goMemLimit, "GOMEMLIMIT"}, true
	}
	total, haveTotal := memTotal(readFile)
	if limit, ok := cgroupLimit(readFile); ok && (!haveTotal || limit.bytes < total) {
		return limit, true
	}
	if haveTotal {
		return memoryFigure{total, "MemTotal"}, true
	}
	return memoryFigure{}, false
}

// memTotal reads MemTotal from /proc/meminfo ("MemTotal:  24684084 kB").
func memTotal(readFile func(string) ([]byte, error)) (int64, bool) {
	b, err := readFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		kb, ok := strings.CutSuffix(strings.TrimSpace(rest), " kB")
		n, err := parseDigits(strings.TrimSpace(kb))
		if !ok || err != nil || n <= 0 || n > math.MaxInt64>>10 {
			return 0, false
		}
		return int64(n) << 10, true
	}
	return 0, false
}

// cgroupLimit reads the memory limit of the process's cgroup, from the
// paths /proc/self/cgroup gives: "0::/path" for cgroup v2,
// "N:memory:/path" (among other controllers) for v1.
func cgroupLimit(readFile func(string) ([]byte, error)) (memoryFigure, bool) {
	b, err := readFile("/proc/self/cgroup")
	if err != nil {
		return memoryFigure{}, false
	}
	best := memoryFigure{bytes: math.MaxInt64}
	for line := range strings.Lines(string(b)) {
		fields := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(fields) != 3 || !strings.HasPrefix(fields[2], "/") {
			continue
		}
		switch p := path.Clean(fields[2]); {
		case fields[0] == "0" && fields[1] == "":
			// v2: a parent's limit bounds its children's too.
			for {
				if n, ok := readLimit(readFile, path.Join("/sys/fs/cgroup", p, "memory.max")); ok && n < best.bytes {
					best = memoryFigure{n, "cgroup memory.max"}
				}
				if p == "/" {
					break
				}
				p = path.Dir(p)
			}
		case slices.Contains(strings.Split(fields[1], ","), "memory"):
			// v1: in a container the path is the host's, and the
			// container's own cgroup is mounted at the top.
			for _, f := range []string{path.Join("/sys/fs/cgroup/memory", p, "memory.limit_in_bytes"), "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
				if n, ok := readLimit(readFile, f); ok {
					if n < best.bytes {
						best = memoryFigure{n, "cgroup memory.limit_in_bytes"}
					}
					break
				}
			}
		}
	}
	return best, best.source != ""
}

// readLimit reads a cgroup limit file: a number of bytes, or "max" (v2)
// or a number past unlimitedCgroup (v1) for none.
func readLimit(readFile func(string) ([]byte, error), name string) (int64, bool) {
	b, err := readFile(name)
	if err != nil {
		return 0, false
	}
	n, err := parseDigits(strings.TrimSuffix(string(b), "\n"))
	if err != nil || n <= 0 || int64(n) >= unlimitedCgroup {
		return 0, false // "max", or not a limit
	}
	return int64(n), true
}

// localCacheDefault is LOCAL_CACHE_BYTES when it is not set, given the
// memory the process may use, and how that figure was reached, to log.
func localCacheDefault(mem memoryFigure, known bool) (int64, string) {
	if !known {
		return fallbackLocalCacheBytes, "no memory figure found (GOMEMLIMIT, cgroup, /proc/meminfo): a fixed default"
	}
	n := min(max(mem.bytes/localCacheShare, minDefaultLocalCacheBytes), maxDefaultLocalCacheBytes)
	how := fmt.Sprintf("1/%d of %s (%d bytes)", localCacheShare, mem.source, mem.bytes)
	if n != mem.bytes/localCacheShare {
		how += fmt.Sprintf(", kept within %d to %d bytes", minDefaultLocalCacheBytes, maxDefaultLocalCacheBytes)
	}
	return n, how
}
