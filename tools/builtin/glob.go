package builtin

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// globPattern matches slash-separated paths. "**" as a whole segment matches
// zero or more path segments; other segments use path.Match syntax (*, ?,
// [class], \ escapes), where * never crosses a "/".
type globPattern struct {
	segs []string
	deep bool // contains "**": no depth bound
}

const maxGlobLen = 1000

func compileGlob(p string) (*globPattern, error) {
	if p == "" {
		return nil, errors.New("empty glob pattern")
	}
	if len(p) > maxGlobLen {
		return nil, fmt.Errorf("glob pattern longer than %d bytes", maxGlobLen)
	}
	if strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("glob pattern %q is absolute: patterns are relative to the search path", p)
	}
	g := &globPattern{}
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "", ".":
			continue
		case "..":
			return nil, fmt.Errorf("glob pattern %q contains \"..\": patterns cannot leave the search path", p)
		case "**":
			g.deep = true
			if n := len(g.segs); n > 0 && g.segs[n-1] == "**" {
				continue
			}
		default:
			if _, err := path.Match(seg, ""); err != nil {
				return nil, fmt.Errorf("bad glob pattern %q: malformed segment %q", p, seg)
			}
		}
		g.segs = append(g.segs, seg)
	}
	if len(g.segs) == 0 {
		return nil, fmt.Errorf("glob pattern %q matches nothing", p)
	}
	return g, nil
}

// maxDepth is how many segments a matching path can have; -1 is unbounded.
func (g *globPattern) maxDepth() int {
	if g.deep {
		return -1
	}
	return len(g.segs)
}

// match reports whether the slash-separated relative name matches. It runs
// in O(len(segs) × depth) with a memo, whatever the number of "**".
func (g *globPattern) match(name string) bool {
	parts := strings.Split(name, "/")
	np := len(parts) + 1
	memo := make([]int8, (len(g.segs)+1)*np) // 0 unknown, 1 no, 2 yes
	var rec func(i, j int) bool
	rec = func(i, j int) bool {
		k := i*np + j
		if memo[k] != 0 {
			return memo[k] == 2
		}
		var ok bool
		switch {
		case i == len(g.segs):
			ok = j == len(parts)
		case g.segs[i] == "**":
			ok = rec(i+1, j) || (j < len(parts) && rec(i, j+1))
		case j == len(parts):
			ok = false
		default:
			m, _ := path.Match(g.segs[i], parts[j])
			ok = m && rec(i+1, j+1)
		}
		memo[k] = 1
		if ok {
			memo[k] = 2
		}
		return ok
	}
	return rec(0, 0)
}
