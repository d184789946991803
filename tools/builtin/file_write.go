package builtin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

const readOnlyMsg = "the workspace is read-only for this job: %s refuses to write"

func writeFileTool(o Options) *tools.Tool {
	return &tools.Tool{
		Name: "write_file",
		Description: "Write text to a file in the workspace, replacing it (or appending with append=true). " +
			"Missing parent directories are created unless create_dirs is false. At most " + humanSize(o.MaxWriteBytes) + " per call.",
		InputSchema: objectSchema(map[string]any{
			"path":        pathProp("File path relative to the workspace (or absolute under /workspace)."),
			"content":     map[string]any{"type": "string", "maxLength": o.MaxWriteBytes, "description": "The text to write, exactly as it should appear in the file."},
			"append":      map[string]any{"type": "boolean", "description": "Append to the end of the file instead of replacing it. Default false."},
			"create_dirs": map[string]any{"type": "boolean", "description": "Create missing parent directories. Default true."},
		}, "path", "content"),
		Effects:      []tools.Effect{tools.EffectFileWrite},
		ParallelSafe: true,
		Run: func(ctx context.Context, env tools.Env, args map[string]any) (tools.Result, error) {
			return runWriteFile(ctx, env, o, args), nil
		},
	}
}

func runWriteFile(_ context.Context, env tools.Env, o Options, args map[string]any) tools.Result {
	start := time.Now()
	if env.ReadOnly && env.Workspace != "" {
		return errResult(start, fmt.Sprintf(readOnlyMsg, "write_file"))
	}
	w, err := openWorkspace(env, o)
	if err != nil {
		return errResult(start, err.Error())
	}
	defer w.Close()
	spent := tools.EffectFileWrite
	p := argString(args, "path", "")
	name, err := w.rel(p)
	if err != nil {
		return errResult(start, err.Error())
	}
	content := argString(args, "content", "")
	if int64(len(content)) > o.MaxWriteBytes {
		return errResult(start, fmt.Sprintf("write %s: content is %s, more than the %s limit", p, humanSize(int64(len(content))), humanSize(o.MaxWriteBytes)))
	}
	if name == "." || strings.HasSuffix(name, "/") {
		return errResult(start, fmt.Sprintf("write %s: path names a directory, not a file", p))
	}
	if argBool(args, "create_dirs", true) {
		if dir := path.Dir(name); dir != "." {
			if err := w.root.MkdirAll(dir, 0o755); err != nil {
				return errResult(start, pathError("create directories for", p, err), spent)
			}
		}
	}
	flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	verb := "wrote"
	if argBool(args, "append", false) {
		flag = os.O_WRONLY | os.O_CREATE | os.O_APPEND
		verb = "appended"
	}
	f, err := openNoBlock(w.root, name, flag, 0o644)
	if err != nil {
		return errResult(start, pathError("write", p, err), spent)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return errResult(start, fmt.Sprintf("write %s: not a regular file", p), spent)
	}
	n, err := io.WriteString(f, content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errResult(start, pathError("write", p, err), spent)
	}
	r := okResult(start, fmt.Sprintf("%s %d bytes to %s", verb, n, display(name)), spent)
	r.Usage.BytesOut = int64(n)
	return r
}

func strReplaceTool(o Options) *tools.Tool {
	return &tools.Tool{
		Name: "str_replace",
		Description: "Edit a text file in the workspace by replacing an exact string. old_string must occur exactly once " +
			"(include enough surrounding lines to make it unique) unless replace_all is true. Whitespace and indentation must match exactly. " +
			"Files up to " + humanSize(o.MaxReadBytes) + ".",
		InputSchema: objectSchema(map[string]any{
			"path":        pathProp("File path relative to the workspace (or absolute under /workspace)."),
			"old_string":  map[string]any{"type": "string", "minLength": 1, "maxLength": o.MaxReadBytes, "description": "The exact text to find (not a regular expression)."},
			"new_string":  map[string]any{"type": "string", "maxLength": o.MaxWriteBytes, "description": "The text to put in its place; may be empty to delete old_string."},
			"replace_all": map[string]any{"type": "boolean", "description": "Replace every occurrence instead of requiring exactly one. Default false."},
		}, "path", "old_string", "new_string"),
		Effects:      []tools.Effect{tools.EffectFileRead, tools.EffectFileWrite},
		ParallelSafe: true,
		Run: func(ctx context.Context, env tools.Env, args map[string]any) (tools.Result, error) {
			return runStrReplace(ctx, env, o, args), nil
		},
	}
}

func runStrReplace(_ context.Context, env tools.Env, o Options, args map[string]any) tools.Result {
	start := time.Now()
	if env.ReadOnly && env.Workspace != "" {
		return errResult(start, fmt.Sprintf(readOnlyMsg, "str_replace"))
	}
	w, err := openWorkspace(env, o)
	if err != nil {
		return errResult(start, err.Error())
	}
	defer w.Close()
	p := argString(args, "path", "")
	name, err := w.rel(p)
	if err != nil {
		return errResult(start, err.Error())
	}
	oldS := argString(args, "old_string", "")
	newS := argString(args, "new_string", "")
	if oldS == "" {
		return errResult(start, "old_string is empty: give the exact text to replace")
	}

	f, err := openNoBlock(w.root, name, os.O_RDWR, 0)
	if err != nil {
		return errResult(start, pathError("edit", p, err), tools.EffectFileRead)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return errResult(start, pathError("edit", p, err), tools.EffectFileRead)
	}
	if !st.Mode().IsRegular() {
		return errResult(start, fmt.Sprintf("edit %s: not a regular file", p), tools.EffectFileRead)
	}
	if st.Size() > o.MaxReadBytes {
		return errResult(start, fmt.Sprintf("edit %s: file is %s, larger than the %s str_replace edits; use python_repl or bash", p, humanSize(st.Size()), humanSize(o.MaxReadBytes)), tools.EffectFileRead)
	}
	data, err := io.ReadAll(io.LimitReader(f, o.MaxReadBytes+1))
	if err != nil {
		return errResult(start, pathError("edit", p, err), tools.EffectFileRead)
	}
	if int64(len(data)) > o.MaxReadBytes {
		return errResult(start, fmt.Sprintf("edit %s: file grew past %s while reading", p, humanSize(o.MaxReadBytes)), tools.EffectFileRead)
	}
	if isBinary(data[:min(len(data), sniffLen)]) {
		return errResult(start, fmt.Sprintf("edit %s: binary file (%s); str_replace edits text only", p, humanSize(st.Size())), tools.EffectFileRead)
	}
	count := bytes.Count(data, []byte(oldS))
	switch {
	case count == 0:
		return errResult(start, fmt.Sprintf("edit %s: old_string not found; it must match the file exactly, including whitespace and indentation (read_file shows the current text)", p), tools.EffectFileRead)
	case count > 1 && !argBool(args, "replace_all", false):
		return errResult(start, fmt.Sprintf("edit %s: old_string found %d times; include more surrounding text to make it unique, or set replace_all=true", p, count), tools.EffectFileRead)
	}
	updated := bytes.ReplaceAll(data, []byte(oldS), []byte(newS))
	if int64(len(updated)) > o.MaxWriteBytes {
		return errResult(start, fmt.Sprintf("edit %s: the result would be %s, more than the %s limit", p, humanSize(int64(len(updated))), humanSize(o.MaxWriteBytes)), tools.EffectFileRead)
	}
	// Rewrite in place through the descriptor already open, so the file
	// checked is the file written and its mode and owner are kept.
	if _, err := f.WriteAt(updated, 0); err != nil {
		return errResult(start, pathError("edit", p, err), tools.EffectFileRead, tools.EffectFileWrite)
	}
	if err := f.Truncate(int64(len(updated))); err != nil {
		return errResult(start, pathError("edit", p, err), tools.EffectFileRead, tools.EffectFileWrite)
	}
	noun := "replacement"
	if count > 1 {
		noun = "replacements"
	}
	r := okResult(start, fmt.Sprintf("made %d %s in %s", count, noun, display(name)), tools.EffectFileRead, tools.EffectFileWrite)
	r.Usage.BytesOut = int64(len(updated))
	return r
}
