package builtin

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// walkSkipDirs are not descended into by recursive walks (they are still
// listed themselves).
var walkSkipDirs = map[string]bool{".git": true}

// openDir opens the directory a walking tool starts from as its own root,
// so every step of the walk stays under os.Root's enforcement.
func openDir(w *workspace, p, op string) (*os.Root, string, string) {
	name, err := w.rel(p)
	if err != nil {
		return nil, "", err.Error()
	}
	st, err := w.root.Stat(name)
	if err != nil {
		return nil, "", pathError(op, display(p), err)
	}
	if !st.IsDir() {
		return nil, name, fmt.Sprintf("%s %s: not a directory", op, display(p))
	}
	sub, err := w.root.OpenRoot(name)
	if err != nil {
		return nil, "", pathError(op, display(p), err)
	}
	return sub, name, ""
}

// joinDisplay shows a name found under base relative to the workspace.
func joinDisplay(base, rel string) string {
	if base == "." || base == "" {
		return rel
	}
	return path.Join(base, rel)
}

func listDirTool(o Options) *tools.Tool {
	return &tools.Tool{
		Name: "list_dir",
		Description: "List a directory in the workspace: one entry per line, sorted, directories with a trailing \"/\", files with their size, " +
			"symbolic links with their target. recursive lists the whole tree (not descending into .git or through symbolic links).",
		InputSchema: objectSchema(map[string]any{
			"path":      pathProp("Directory relative to the workspace (or absolute under /workspace). Default \".\", the workspace root."),
			"recursive": map[string]any{"type": "boolean", "description": "List the whole tree below path, not just its direct entries. Default false."},
			"max_entries": map[string]any{
				"type": "integer", "minimum": 1, "maximum": o.MaxEntries,
				"description": fmt.Sprintf("Stop after this many entries. Default %d.", min(defaultListEntries, o.MaxEntries)),
			},
		}),
		Effects:      []tools.Effect{tools.EffectFileRead},
		ParallelSafe: true,
		Run: func(ctx context.Context, env tools.Env, args map[string]any) (tools.Result, error) {
			return runListDir(ctx, env, o, args), nil
		},
	}
}

func runListDir(ctx context.Context, env tools.Env, o Options, args map[string]any) tools.Result {
	start := time.Now()
	w, err := openWorkspace(env, o)
	if err != nil {
		return errResult(start, err.Error())
	}
	defer w.Close()
	spent := tools.EffectFileRead
	p := argString(args, "path", ".")
	sub, name, msg := openDir(w, p, "list")
	if msg != "" {
		return errResult(start, msg, spent)
	}
	defer sub.Close()
	maxEntries := argInt(args, "max_entries", min(defaultListEntries, o.MaxEntries), 1, o.MaxEntries)
	recursive := argBool(args, "recursive", false)

	var lines []string
	size := 0
	truncated := ""
	visited := 0
	fsys := sub.FS()
	walkErr := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == "." {
			if err != nil {
				return err
			}
			return nil
		}
		if visited++; visited > o.MaxWalkEntries {
			truncated = fmt.Sprintf("[stopped after visiting %d entries]", o.MaxWalkEntries)
			return fs.SkipAll
		}
		if len(lines) >= maxEntries {
			truncated = fmt.Sprintf("[truncated at %d entries; raise max_entries or list a subdirectory]", maxEntries)
			return fs.SkipAll
		}
		if err != nil {
			return nil // an unreadable directory was already listed
		}
		line := describeEntry(sub, name, d)
		if size+len(line)+1 > o.MaxOutputBytes {
			truncated = fmt.Sprintf("[truncated at %s of output]", humanSize(int64(o.MaxOutputBytes)))
			return fs.SkipAll
		}
		size += len(line) + 1
		lines = append(lines, line)
		if d.IsDir() && (!recursive || walkSkipDirs[d.Name()]) {
			return fs.SkipDir
		}
		return nil
	})
	if walkErr != nil {
		return errResult(start, pathError("list", display(p), walkErr), spent)
	}
	sort.Strings(lines)
	var b strings.Builder
	fmt.Fprintf(&b, "%s/ (%d entries)\n", strings.TrimSuffix(display(name), "/"), len(lines))
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if truncated != "" {
		b.WriteString(truncated)
		b.WriteByte('\n')
	}
	return okResult(start, strings.TrimSuffix(b.String(), "\n"), spent)
}

func describeEntry(sub *os.Root, name string, d fs.DirEntry) string {
	switch {
	case d.IsDir():
		return name + "/"
	case d.Type()&fs.ModeSymlink != 0:
		target, err := sub.Readlink(name)
		if err != nil {
			return name + " -> ?"
		}
		return name + " -> " + target
	case d.Type().IsRegular():
		info, err := d.Info()
		if err != nil {
			return name
		}
		return fmt.Sprintf("%s  (%d bytes)", name, info.Size())
	}
	return fmt.Sprintf("%s  (%s)", name, d.Type())
}

func globSearchTool(o Options) *tools.Tool {
	return &tools.Tool{
		Name: "glob_search",
		Description: "Find files and directories in the workspace whose path matches a glob pattern, relative to path. " +
			"* and ? match within one path segment, [abc] is a class, ** matches any number of directories: \"**/*.go\" finds Go files at any depth, \"*.go\" only directly in path. " +
			fmt.Sprintf("Returns matching paths (relative to the workspace) sorted, directories with a trailing \"/\", at most %d. .git is not searched.", o.MaxEntries),
		InputSchema: objectSchema(map[string]any{
			"pattern": map[string]any{"type": "string", "minLength": 1, "maxLength": maxGlobLen, "description": "Glob pattern, e.g. \"**/*.py\" or \"src/*/test_*.go\"."},
			"path":    pathProp("Directory to search from, relative to the workspace. Default \".\"."),
		}, "pattern"),
		Effects:      []tools.Effect{tools.EffectFileRead},
		ParallelSafe: true,
		Run: func(ctx context.Context, env tools.Env, args map[string]any) (tools.Result, error) {
			return runGlob(ctx, env, o, args), nil
		},
	}
}

func runGlob(ctx context.Context, env tools.Env, o Options, args map[string]any) tools.Result {
	start := time.Now()
	w, err := openWorkspace(env, o)
	if err != nil {
		return errResult(start, err.Error())
	}
	defer w.Close()
	spent := tools.EffectFileRead
	g, err := compileGlob(strings.TrimPrefix(argString(args, "pattern", ""), "./"))
	if err != nil {
		return errResult(start, err.Error())
	}
	p := argString(args, "path", ".")
	sub, base, msg := openDir(w, p, "search")
	if msg != "" {
		return errResult(start, msg, spent)
	}
	defer sub.Close()

	var found []string
	size, visited := 0, 0
	note := ""
	depth := g.maxDepth()
	walkErr := fs.WalkDir(sub.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == "." {
			return err
		}
		if err != nil {
			return nil
		}
		if visited++; visited > o.MaxWalkEntries {
			note = fmt.Sprintf("[stopped after visiting %d entries; search a subdirectory]", o.MaxWalkEntries)
			return fs.SkipAll
		}
		if g.match(name) {
			if len(found) >= o.MaxEntries {
				note = fmt.Sprintf("[truncated at %d matches; narrow the pattern]", o.MaxEntries)
				return fs.SkipAll
			}
			s := joinDisplay(display(base), name)
			if d.IsDir() {
				s += "/"
			}
			if size+len(s)+1 > o.MaxOutputBytes {
				note = fmt.Sprintf("[truncated at %s of output; narrow the pattern]", humanSize(int64(o.MaxOutputBytes)))
				return fs.SkipAll
			}
			size += len(s) + 1
			found = append(found, s)
		}
		if d.IsDir() {
			if walkSkipDirs[d.Name()] || (depth >= 0 && strings.Count(name, "/")+1 >= depth) {
				return fs.SkipDir
			}
		}
		return nil
	})
	if walkErr != nil {
		return errResult(start, pathError("search", display(p), walkErr), spent)
	}
	sort.Strings(found)
	if len(found) == 0 {
		return okResult(start, "no matches", spent)
	}
	out := strings.Join(found, "\n")
	if note != "" {
		out += "\n" + note
	}
	return okResult(start, out, spent)
}
