package hostside

import (
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/runner"
)

// ValidLimits checks a container runner's default limits: none negative,
// memory at least the runtimes' minimum of 6 MiB.
func ValidLimits(l runner.Limits) error {
	for name, v := range map[string]int64{
		"memory_bytes": l.MemoryBytes, "pids": l.PIDs, "cpu_millis": l.CPUMillis,
		"timeout": int64(l.Timeout), "output_bytes": l.OutputBytes, "nofile": l.NoFile, "file_size_bytes": l.FileSize,
		"disk_bytes": l.DiskBytes, "disk_inodes": l.DiskInodes,
	} {
		if v < 0 {
			return fmt.Errorf("limit %s = %d is negative", name, v)
		}
	}
	if l.MemoryBytes != 0 && l.MemoryBytes < 6<<20 {
		return fmt.Errorf("limit memory_bytes = %d is below the minimum of 6 MiB", l.MemoryBytes)
	}
	return nil
}

// MergeLimits fills zero fields of l from def; def is a ceiling that l may
// only lower.
func MergeLimits(l, def runner.Limits) runner.Limits {
	pick := func(v, d int64) int64 {
		if v == 0 || (d != 0 && v > d) {
			return d
		}
		return v
	}
	return runner.Limits{
		MemoryBytes: pick(l.MemoryBytes, def.MemoryBytes),
		PIDs:        pick(l.PIDs, def.PIDs),
		CPUMillis:   pick(l.CPUMillis, def.CPUMillis),
		Timeout:     time.Duration(pick(int64(l.Timeout), int64(def.Timeout))),
		OutputBytes: pick(l.OutputBytes, def.OutputBytes),
		NoFile:      pick(l.NoFile, def.NoFile),
		FileSize:    pick(l.FileSize, def.FileSize),
		DiskBytes:   pick(l.DiskBytes, def.DiskBytes),
		DiskInodes:  pick(l.DiskInodes, def.DiskInodes),
	}
}

// FillLimits fills zero fields of l from d, clipping nothing: a runner's
// configured limits (the operator's ceilings) over its built-in ones.
func FillLimits(l, d runner.Limits) runner.Limits {
	pick := func(v, d int64) int64 {
		if v == 0 {
			return d
		}
		return v
	}
	return runner.Limits{
		MemoryBytes: pick(l.MemoryBytes, d.MemoryBytes),
		PIDs:        pick(l.PIDs, d.PIDs),
		CPUMillis:   pick(l.CPUMillis, d.CPUMillis),
		Timeout:     time.Duration(pick(int64(l.Timeout), int64(d.Timeout))),
		OutputBytes: pick(l.OutputBytes, d.OutputBytes),
		NoFile:      pick(l.NoFile, d.NoFile),
		FileSize:    pick(l.FileSize, d.FileSize),
	}
}
