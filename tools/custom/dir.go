package custom

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// Options configure a Directory.
type Options struct {
	// Dir is the tools directory; its *.yaml, *.yml and *.py files are
	// read (not subdirectories; names starting with "." are skipped).
	Dir string
	// Registry receives the tools. Tools already in it when the Directory
	// is made are the built-ins: a file may replace one only when its name
	// is in Replace.
	Registry *tools.Registry
	Replace  []string
	// Sandbox derives Python function tools' schemas (nil: .py files are
	// refused).
	Sandbox Sandbox
	// PythonPath is the interpreter inside sandboxes. Default
	// /usr/bin/python3.
	PythonPath string
	Logger     *slog.Logger
}

// Directory loads a tools directory into a registry and reloads it.
type Directory struct {
	opts     Options
	builtins map[string]*tools.Tool // lower-case name → the built-in before any file

	mu     sync.Mutex
	loaded map[string]*tools.Tool // lower-case name → what this directory registered
	status tools.SourceStatus
}

// NewDirectory remembers the registry's tools as the built-ins; call
// Reload to load the files.
func NewDirectory(opts Options) *Directory {
	if opts.PythonPath == "" {
		opts.PythonPath = "/usr/bin/python3"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := &Directory{opts: opts, builtins: map[string]*tools.Tool{}, loaded: map[string]*tools.Tool{}}
	for _, t := range opts.Registry.Tools() {
		d.builtins[strings.ToLower(t.Name)] = t
	}
	d.status = tools.SourceStatus{Name: opts.Dir, Kind: "directory", State: "loaded", Tools: []string{}}
	return d
}

// Status is the directory's state after the last Reload.
func (d *Directory) Status() tools.SourceStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.status
	st.Tools = slices.Clone(st.Tools)
	st.Problems = slices.Clone(st.Problems)
	return st
}

// Reload reads every file again and makes the registry hold exactly the
// tools that loaded: new ones are added, changed ones replaced, those of
// removed or now-broken files removed (a replaced built-in comes back).
// Each bad file is logged with its path and the problem and listed in the
// status; it never keeps the others from loading. A missing or unreadable
// directory is reported the same way (no tools from it).
func (d *Directory) Reload(ctx context.Context) (tools.SourceStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	log := d.opts.Logger
	var problems []tools.FileProblem
	bad := func(path string, err error) {
		log.Warn("tool file refused", "path", path, "err", err)
		problems = append(problems, tools.FileProblem{Path: path, Error: err.Error()})
	}
	next := map[string]*tools.Tool{}
	var order []string
	from := map[string]string{} // lower name → file that defines it
	add := func(path string, t *tools.Tool) {
		key := strings.ToLower(t.Name)
		switch {
		case strings.Contains(t.Name, "__"):
			bad(path, fmt.Errorf("tool name %q: names with \"__\" are reserved for providers' tools (<provider>__<tool>)", t.Name))
			return
		case from[key] != "":
			bad(path, fmt.Errorf("tool %s is defined by %s already", t.Name, from[key]))
			return
		case d.builtins[key] != nil && !slices.ContainsFunc(d.opts.Replace, func(n string) bool { return strings.EqualFold(n, t.Name) }):
			bad(path, fmt.Errorf("tool %s would replace the built-in of that name; list it in tools.replace_builtins to allow that", t.Name))
			return
		}
		if err := tools.NewRegistry().Register(t); err != nil { // validates like the real one
			bad(path, err)
			return
		}
		next[key], from[key] = t, path
		order = append(order, key)
	}

	entries, err := os.ReadDir(d.opts.Dir)
	if err != nil {
		bad(d.opts.Dir, err)
	}
	var pyFiles []string
	scripts := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(d.opts.Dir, name)
		if strings.HasPrefix(name, ".") || !e.Type().IsRegular() {
			continue
		}
		switch strings.ToLower(filepath.Ext(name)) {
		case ".yaml", ".yml":
			data, err := os.ReadFile(path)
			if err != nil {
				bad(path, err)
				continue
			}
			t, script, err := parseYAML(path, d.opts.Dir, data)
			if err != nil {
				bad(path, err)
				continue
			}
			if script != "" {
				scripts[script] = true
			}
			add(path, t)
		case ".py":
			pyFiles = append(pyFiles, path)
		}
	}
	for _, path := range pyFiles {
		if scripts[path] {
			continue // a YAML tool's script, not a function tool
		}
		src, err := os.ReadFile(path)
		if err != nil {
			bad(path, err)
			continue
		}
		t, err := parsePython(ctx, d.opts.Sandbox, d.opts.PythonPath, path, src)
		if err != nil {
			bad(path, err)
			continue
		}
		add(path, t)
	}

	reg := d.opts.Registry
	for key, old := range d.loaded {
		if next[key] != nil {
			continue
		}
		if b := d.builtins[key]; b != nil {
			_ = reg.Register(b) // a replaced built-in comes back, in its place
		} else {
			reg.Remove(old.Name)
		}
		log.Info("tool removed", "tool", old.Name, "source", old.Source)
	}
	names := make([]string, 0, len(order))
	for _, key := range order {
		t := next[key]
		if err := reg.Register(t); err != nil { // validated above; cannot fail
			bad(from[key], err)
			delete(next, key)
			continue
		}
		names = append(names, t.Name)
	}
	d.loaded = next
	d.status = tools.SourceStatus{Name: d.opts.Dir, Kind: "directory", State: "loaded", Tools: names,
		Since: time.Now().UTC(), Problems: problems}
	log.Info("tools directory loaded", "dir", d.opts.Dir, "tools", len(names), "refused", len(problems))
	st := d.status
	st.Tools, st.Problems = slices.Clone(names), slices.Clone(problems)
	return st, nil
}
