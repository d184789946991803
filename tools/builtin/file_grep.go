package builtin

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/tools"
)

const (
	maxGrepLineShown = 400
	maxGrepLineRead  = 1 << 20
)

func grepSearchTool(o Options) *tools.Tool {
	return &tools.Tool{
		Name: "grep_search",
		Description: "Search the text files of the workspace for lines matching a regular expression (Go RE2 syntax, no backreferences or lookaround). " +
			"Returns \"file:line: text\" lines, files in path order. Binary files, files larger than " + humanSize(o.MaxGrepFileBytes) +
			", symbolic links and .git are skipped. Long lines are shortened.",
		InputSchema: objectSchema(map[string]any{
			"pattern":          map[string]any{"type": "string", "minLength": 1, "maxLength": 10000, "description": "Regular expression in Go RE2 syntax, e.g. \"func \\\\w+\\\\(\" or \"TODO|FIXME\"."},
			"path":             pathProp("File or directory to search, relative to the workspace. Default \".\"."),
			"glob":             map[string]any{"type": "string", "minLength": 1, "maxLength": maxGlobLen, "description": "Only search files matching this glob: without a \"/\" it is matched against the file name (\"*.py\"), otherwise against the path relative to path (\"src/**/*.go\")."},
			"case_insensitive": map[string]any{"type": "boolean", "description": "Match letters regardless of case. Default false."},
			"max_matches": map[string]any{
				"type": "integer", "minimum": 1, "maximum": o.MaxMatches,
				"description": fmt.Sprintf("Stop after this many matching lines. Default %d.", min(defaultGrepMatches, o.MaxMatches)),
			},
		}, "pattern"),
		Effects:      []tools.Effect{tools.EffectFileRead},
		ParallelSafe: true,
		Run: func(ctx context.Context, env tools.Env, args map[string]any) (tools.Result, error) {
			return runGrep(ctx, env, o, args), nil
		},
	}
}

type grepper struct {
	o          Options
	re         *regexp.Regexp
	max        int
	matches    int
	size       int
	out        strings.Builder
	note       string
	skippedBig int
}

// full reports whether no more output may be added.
func (g *grepper) full() bool { return g.note != "" }

// file searches one file; open failing (vanished, unreadable, a link
// leading out of the workspace) skips it.
func (g *grepper) file(ctx context.Context, open func() (fs.File, error), shown string) error {
	f, err := open()
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil
	} else if st.Size() > g.o.MaxGrepFileBytes {
		g.skippedBig++
		return nil
	}
	br := bufio.NewReaderSize(f, 64<<10)
	if head, _ := br.Peek(sniffLen); isBinary(head) {
		return nil
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 64<<10), maxGrepLineRead)
	for n := 1; sc.Scan(); n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		line := sc.Bytes()
		if !g.re.Match(line) {
			continue
		}
		if g.matches >= g.max {
			g.note = fmt.Sprintf("[stopped at %d matches; raise max_matches or narrow the search]", g.max)
			return nil
		}
		text := strings.TrimRight(string(line), "\r")
		if len(text) > maxGrepLineShown {
			cut := maxGrepLineShown
			for cut > 0 && !utf8.RuneStart(text[cut]) {
				cut--
			}
			text = text[:cut] + fmt.Sprintf(" …[line shortened, %d bytes]", len(line))
		}
		entry := fmt.Sprintf("%s:%d: %s\n", shown, n, text)
		if g.size+len(entry) > g.o.MaxOutputBytes {
			g.note = fmt.Sprintf("[stopped at %s of output; narrow the search]", humanSize(int64(g.o.MaxOutputBytes)))
			return nil
		}
		g.size += len(entry)
		g.matches++
		g.out.WriteString(entry)
	}
	// A read error or an over-long line ends this file, not the search.
	return nil
}

func runGrep(ctx context.Context, env tools.Env, o Options, args map[string]any) tools.Result {
	start := time.Now()
	w, err := openWorkspace(env, o)
	if err != nil {
		return errResult(start, err.Error())
	}
	defer w.Close()
	spent := tools.EffectFileRead

	expr := argString(args, "pattern", "")
	if argBool(args, "case_insensitive", false) {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return errResult(start, fmt.Sprintf("bad regular expression: %v (Go RE2 syntax: no backreferences or lookaround)", err))
	}
	var filter *globPattern
	var filterBase bool
	if gs := argString(args, "glob", ""); gs != "" {
		filter, err = compileGlob(strings.TrimPrefix(gs, "./"))
		if err != nil {
			return errResult(start, err.Error())
		}
		filterBase = !strings.Contains(strings.Trim(gs, "/"), "/")
	}
	g := &grepper{o: o, re: re, max: argInt(args, "max_matches", min(defaultGrepMatches, o.MaxMatches), 1, o.MaxMatches)}

	p := argString(args, "path", ".")
	name, err := w.rel(p)
	if err != nil {
		return errResult(start, err.Error())
	}
	st, err := w.root.Stat(name)
	if err != nil {
		return errResult(start, pathError("search", display(p), err), spent)
	}
	if !st.IsDir() {
		// One file: the filter does not apply to a file named explicitly.
		open := func() (fs.File, error) { return openNoBlock(w.root, name, os.O_RDONLY, 0) }
		if err := g.file(ctx, open, display(name)); err != nil {
			return errResult(start, "search "+display(p)+": "+err.Error(), spent)
		}
		return grepResult(start, g, spent)
	}
	sub, err := w.root.OpenRoot(name)
	if err != nil {
		return errResult(start, pathError("search", display(p), err), spent)
	}
	defer sub.Close()
	fsys := sub.FS()
	visited := 0
	walkErr := fs.WalkDir(fsys, ".", func(rel string, d fs.DirEntry, err error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if rel == "." {
			return err
		}
		if err != nil || g.full() {
			if g.full() {
				return fs.SkipAll
			}
			return nil
		}
		if visited++; visited > o.MaxWalkEntries {
			g.note = fmt.Sprintf("[stopped after visiting %d entries; search a subdirectory]", o.MaxWalkEntries)
			return fs.SkipAll
		}
		if d.IsDir() {
			if walkSkipDirs[d.Name()] {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if filter != nil {
			target := rel
			if filterBase {
				target = d.Name()
			}
			if !filter.match(target) {
				return nil
			}
		}
		return g.file(ctx, func() (fs.File, error) { return openNoBlock(sub, rel, os.O_RDONLY, 0) }, joinDisplay(display(name), rel))
	})
	if walkErr != nil {
		return errResult(start, pathError("search", display(p), walkErr), spent)
	}
	return grepResult(start, g, spent)
}

func grepResult(start time.Time, g *grepper, spent tools.Effect) tools.Result {
	out := g.out.String()
	if g.matches == 0 {
		out = "no matches\n"
	}
	if g.skippedBig > 0 {
		out += fmt.Sprintf("[skipped %d files larger than %s]\n", g.skippedBig, humanSize(g.o.MaxGrepFileBytes))
	}
	if g.note != "" {
		out += g.note + "\n"
	}
	return okResult(start, strings.TrimSuffix(out, "\n"), spent)
}
