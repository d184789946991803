package builtin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

func pathProp(desc string) map[string]any {
	return map[string]any{
		"type":        "string",
		"minLength":   1,
		"maxLength":   4096,
		"description": desc,
	}
}

func readFileTool(o Options) *tools.Tool {
	return &tools.Tool{
		Name: "read_file",
		Description: fmt.Sprintf("Read a text file in the workspace. Optionally start at a line (offset, 1-based) and read at most limit lines. "+
			"At most %s of text is returned; a note says where to continue. Binary files are refused.", humanSize(o.MaxReadBytes)),
		InputSchema: objectSchema(map[string]any{
			"path": pathProp("File path, relative to the workspace (or absolute under /workspace)."),
			"offset": map[string]any{
				"type": "integer", "minimum": 1, "maximum": 1 << 31,
				"description": "First line to return, 1-based. Default 1.",
			},
			"limit": map[string]any{
				"type": "integer", "minimum": 1, "maximum": 1 << 31,
				"description": "Maximum number of lines to return. Default: all lines up to the size cap.",
			},
		}, "path"),
		Effects:      []tools.Effect{tools.EffectFileRead},
		ParallelSafe: true,
		Run: func(ctx context.Context, env tools.Env, args map[string]any) (tools.Result, error) {
			return runReadFile(ctx, env, o, args), nil
		},
	}
}

func runReadFile(ctx context.Context, env tools.Env, o Options, args map[string]any) tools.Result {
	start := time.Now()
	w, err := openWorkspace(env, o)
	if err != nil {
		return errResult(start, err.Error())
	}
	defer w.Close()
	spent := tools.EffectFileRead
	p := argString(args, "path", "")
	name, err := w.rel(p)
	if err != nil {
		return errResult(start, err.Error())
	}
	offset := argInt(args, "offset", 1, 1, 1<<31)
	limit := argInt(args, "limit", 0, 1, 1<<31)
	if _, ok := args["limit"]; !ok {
		limit = -1
	}

	f, err := openNoBlock(w.root, name, os.O_RDONLY, 0)
	if err != nil {
		return errResult(start, pathError("read", p, err), spent)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return errResult(start, pathError("read", p, err), spent)
	}
	if st.IsDir() {
		return errResult(start, fmt.Sprintf("read %s: is a directory; use list_dir to see its entries", p), spent)
	}
	if !st.Mode().IsRegular() {
		return errResult(start, fmt.Sprintf("read %s: not a regular file (%s)", p, st.Mode().Type()), spent)
	}

	br := bufio.NewReaderSize(f, 64<<10)
	head, _ := br.Peek(sniffLen)
	if isBinary(head) {
		return errResult(start, fmt.Sprintf("read %s: binary file (%s, contains NUL bytes); read_file returns text only. Use python_repl or bash (e.g. xxd, file) to inspect it", p, humanSize(st.Size())), spent)
	}

	var out bytes.Buffer
	line, taken := 1, 0
	truncated, more := false, false
	for {
		if line%4096 == 0 && ctx.Err() != nil {
			return errResult(start, "read "+p+": "+ctx.Err().Error(), spent)
		}
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if line >= offset {
				if limit >= 0 && taken >= limit {
					more = true
					break
				}
				room := int(o.MaxReadBytes) - out.Len()
				if len(chunk) > room {
					out.Write(chunk[:room])
					truncated = true
					break
				}
				out.Write(chunk)
			}
			if chunk[len(chunk)-1] == '\n' {
				if line >= offset {
					taken++
				}
				line++
			}
		}
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if !errors.Is(err, io.EOF) {
				return errResult(start, pathError("read", p, err), spent)
			}
			if len(chunk) > 0 && chunk[len(chunk)-1] != '\n' && line >= offset {
				taken++ // a last line without a newline
			}
			break
		}
	}
	if bytes.IndexByte(out.Bytes(), 0) >= 0 {
		return errResult(start, fmt.Sprintf("read %s: binary file (%s, contains NUL bytes); read_file returns text only", p, humanSize(st.Size())), spent)
	}
	content := out.String()
	switch {
	case taken == 0 && offset > 1 && out.Len() == 0:
		content = fmt.Sprintf("[%s has fewer than %d lines]", p, offset)
	case truncated:
		content += fmt.Sprintf("\n[truncated: output capped at %s (file is %s); continue with offset=%d]", humanSize(o.MaxReadBytes), humanSize(st.Size()), offset+taken)
	case more:
		content += fmt.Sprintf("\n[more lines follow; continue with offset=%d]", offset+taken)
	}
	return okResult(start, content, spent)
}

func fileInfoTool(o Options) *tools.Tool {
	return &tools.Tool{
		Name: "file_info",
		Description: "Describe a path in the workspace without reading it as text: type (file, dir, symlink, other), size, permission mode, modification time, " +
			"whether it is a symbolic link (and its target), and the SHA-256 of regular files up to " + humanSize(o.MaxHashBytes) + ". Returns JSON.",
		InputSchema: objectSchema(map[string]any{
			"path": pathProp("Path relative to the workspace (or absolute under /workspace)."),
		}, "path"),
		OutputSchema: mustSchema(map[string]any{
			"type": "object",
			"properties": map[string]any{
				"path":           map[string]any{"type": "string", "description": "The path as given, tidied."},
				"type":           map[string]any{"enum": []string{"file", "dir", "symlink", "other"}, "description": "What the path is, following a symbolic link that stays inside the workspace."},
				"size":           map[string]any{"type": "integer", "description": "Size in bytes."},
				"mode":           map[string]any{"type": "string", "description": "Permission bits in ls -l form."},
				"mode_octal":     map[string]any{"type": "string", "description": "Permission bits in octal."},
				"mtime":          map[string]any{"type": "string", "format": "date-time", "description": "Modification time, RFC 3339."},
				"is_symlink":     map[string]any{"type": "boolean", "description": "Whether the path itself is a symbolic link."},
				"link_target":    map[string]any{"type": "string", "description": "The text of the symbolic link."},
				"target_error":   map[string]any{"type": "string", "description": "Why the link's target cannot be used (missing, or outside the workspace)."},
				"sha256":         map[string]any{"type": "string", "description": "Hex SHA-256 of a regular file's contents."},
				"sha256_skipped": map[string]any{"type": "string", "description": "Why the hash was not computed."},
			},
		}),
		Effects:      []tools.Effect{tools.EffectFileRead},
		ParallelSafe: true,
		Run: func(ctx context.Context, env tools.Env, args map[string]any) (tools.Result, error) {
			return runFileInfo(ctx, env, o, args), nil
		},
	}
}

type fileInfo struct {
	Path          string `json:"path"`
	Type          string `json:"type"`
	Size          int64  `json:"size"`
	Mode          string `json:"mode"`
	ModeOctal     string `json:"mode_octal"`
	MTime         string `json:"mtime"`
	IsSymlink     bool   `json:"is_symlink"`
	LinkTarget    string `json:"link_target,omitempty"`
	TargetError   string `json:"target_error,omitempty"`
	SHA256        string `json:"sha256,omitempty"`
	SHA256Skipped string `json:"sha256_skipped,omitempty"`
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

func runFileInfo(ctx context.Context, env tools.Env, o Options, args map[string]any) tools.Result {
	start := time.Now()
	w, err := openWorkspace(env, o)
	if err != nil {
		return errResult(start, err.Error())
	}
	defer w.Close()
	spent := tools.EffectFileRead
	p := argString(args, "path", "")
	name, err := w.rel(p)
	if err != nil {
		return errResult(start, err.Error())
	}
	lst, err := w.root.Lstat(name)
	if err != nil {
		return errResult(start, pathError("stat", p, err), spent)
	}
	st := lst
	info := fileInfo{Path: display(name), IsSymlink: lst.Mode()&fs.ModeSymlink != 0}
	if info.IsSymlink {
		if target, err := w.root.Readlink(name); err == nil {
			info.LinkTarget = target
		}
		if fst, err := w.root.Stat(name); err == nil {
			st = fst
		} else {
			info.TargetError = pathError("follow link", p, err)
		}
	}
	info.Type = fileType(st.Mode())
	info.Size = st.Size()
	info.Mode = st.Mode().String()
	info.ModeOctal = fmt.Sprintf("%04o", st.Mode().Perm())
	info.MTime = st.ModTime().UTC().Format(time.RFC3339Nano)

	if st.Mode().IsRegular() {
		switch {
		case st.Size() > o.MaxHashBytes:
			info.SHA256Skipped = fmt.Sprintf("file is larger than %s", humanSize(o.MaxHashBytes))
		default:
			sum, err := hashFile(ctx, w, name, o.MaxHashBytes)
			if err != nil {
				info.SHA256Skipped = pathError("hash", p, err)
			} else {
				info.SHA256 = sum
			}
		}
	}
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return errResult(start, "encode file info: "+err.Error(), spent)
	}
	return okResult(start, string(b), spent)
}

func hashFile(ctx context.Context, w *workspace, name string, max int64) (string, error) {
	f, err := openNoBlock(w.root, name, os.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return "", err
	} else if !st.Mode().IsRegular() {
		return "", fmt.Errorf("not a regular file")
	}
	h := sha256.New()
	n, err := io.Copy(h, &ctxReader{ctx: ctx, r: io.LimitReader(f, max+1)})
	if err != nil {
		return "", err
	}
	if n > max {
		return "", fmt.Errorf("file grew past %s while hashing", humanSize(max))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ctxReader stops a long read when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
