package workspace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Cleanup releases what an earlier process with the same Root left behind
// (kill -9 leaves the mounts; their loop devices and images go with them):
// it unmounts every mount below Root, deepest first, removes the emptied
// mount points, and detaches the loop devices whose image is under Root
// and no mount holds any more. Only Root's: another instance's
// workspaces, loop devices and mounts are never touched. Call it once at
// start, after the runner reaped the sandboxes that bound the workspaces,
// and before making new ones. It returns how many mounts it removed.
func (m *Manager) Cleanup() (int, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return 0, fmt.Errorf("workspace cleanup: %w", err)
	}
	points, err := mountPoints(f)
	f.Close()
	if err != nil {
		return 0, fmt.Errorf("workspace cleanup: %w", err)
	}
	m.mu.Lock()
	var stale []string
	for _, p := range points {
		if m.below(p) && m.live[p] == nil && m.live[strings.TrimSuffix(p, ".ro")] == nil {
			stale = append(stale, p)
		}
	}
	m.mu.Unlock()
	// Deepest first; a path mounted twice appears twice.
	slices.SortFunc(stale, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	n := 0
	for _, p := range stale {
		if err := unmount(p); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	for _, p := range slices.Compact(stale) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			m.log.Warn("workspace cleanup: remove mount point", "dir", p, "err", err)
		}
	}
	if m.fs != nil {
		for _, d := range m.fs.loops.ours() {
			if err := m.fs.loops.detach(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return n, errors.Join(errs...)
}

// mountPoints lists the mount points of a mountinfo file in its order
// (parents before children), unescaped.
func mountPoints(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mount-point options ...
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			return nil, fmt.Errorf("malformed mountinfo line %q", sc.Text())
		}
		out = append(out, unescapeMount(f[4]))
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 space, \011 tab,
// \012 newline, \134 backslash).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
