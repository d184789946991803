package main

import (
	"archive/tar"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/api/client"
)

const sessionUsage = `Usage:
  sandboxd session create [--image I] [--effects exec,file_read,file_write] [--ttl 1h] [--idle 10m]
  sandboxd session list
  sandboxd session rm ID

create prints the new session's ID; run tools in it with
sandboxd run TOOL --session ID.
`

func cmdSession(ctx context.Context, args []string, e env) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stderr, sessionUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	sub, rest := args[0], args[1:]
	fset := flag.NewFlagSet("session "+sub, flag.ContinueOnError)
	fset.SetOutput(e.stderr)
	var cf clientFlags
	cf.register(fset, e)
	switch sub {
	case "create":
		image := fset.String("image", "", "image (runner specific; default the runner's)")
		effects := fset.String("effects", "", "comma-separated effects (default exec,file_read,file_write)")
		ttl := fset.Duration("ttl", 0, "lifetime (default the server's, 1h)")
		idle := fset.Duration("idle", 0, "close when unused this long (default the server's, 10m)")
		if code, ok := parseFlags(fset, rest); !ok {
			return code
		}
		if fset.NArg() > 0 {
			fmt.Fprintf(e.stderr, "sandboxd session create: unexpected argument %q\n", fset.Arg(0))
			return exitUsage
		}
		if *ttl < 0 || *idle < 0 || (*ttl > 0 && *ttl < time.Second) || (*idle > 0 && *idle < time.Second) {
			fmt.Fprintln(e.stderr, "sandboxd session create: --ttl and --idle must be at least 1s")
			return exitUsage
		}
		req := client.SessionRequest{Image: *image, TTLSeconds: int64(*ttl / time.Second), IdleTimeoutSeconds: int64(*idle / time.Second)}
		if *effects != "" {
			for _, s := range strings.Split(*effects, ",") {
				req.Effects = append(req.Effects, strings.TrimSpace(s))
			}
		}
		s, err := cf.client().CreateSession(ctx, req)
		if err != nil {
			return reportError(e, cf.url, err)
		}
		fmt.Fprintln(e.stdout, s.ID)
		return exitOK
	case "list", "ls":
		if code, ok := parseFlags(fset, rest); !ok {
			return code
		}
		c := cf.client()
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tEFFECTS\tCREATED\tEXPIRES\tREASON")
		cursor := ""
		for {
			list, next, err := c.ListSessions(ctx, client.SessionListOptions{Cursor: cursor, Limit: 500})
			if err != nil {
				return reportError(e, cf.url, err)
			}
			for _, s := range list {
				eff := make([]string, len(s.Effects))
				for i, x := range s.Effects {
					eff[i] = string(x)
				}
				reason := s.Reason
				if reason == "" {
					reason = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.State, strings.Join(eff, ","),
					s.CreatedAt.Local().Format(time.DateTime), s.ExpiresAt.Local().Format(time.DateTime), reason)
			}
			if cursor = next; cursor == "" {
				break
			}
		}
		_ = tw.Flush()
		return exitOK
	case "rm", "delete":
		ids, code, ok := parseInterleaved(fset, rest)
		if !ok {
			return code
		}
		if len(ids) == 0 {
			fmt.Fprintln(e.stderr, "sandboxd session rm: want at least one session ID")
			return exitUsage
		}
		for _, id := range ids {
			if _, err := cf.client().DeleteSession(ctx, id); err != nil {
				return reportError(e, cf.url, err)
			}
		}
		return exitOK
	default:
		fmt.Fprintf(e.stderr, "sandboxd session: unknown subcommand %q\n\n%s", sub, sessionUsage)
		return exitUsage
	}
}

const filesUsage = `Usage:
  sandboxd files put --session ID LOCAL [REMOTE]
  sandboxd files get --session ID REMOTE [LOCAL]

put uploads a file (a directory is sent as a tar and unpacked at REMOTE);
REMOTE defaults to LOCAL's base name in the workspace. get downloads a file
(a directory arrives as a tar and is unpacked into LOCAL); LOCAL defaults
to REMOTE's base name, "-" is stdout (a directory's tar itself).
`

func cmdFiles(ctx context.Context, args []string, e env) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stderr, filesUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	sub, rest := args[0], args[1:]
	fset := flag.NewFlagSet("files "+sub, flag.ContinueOnError)
	fset.SetOutput(e.stderr)
	var cf clientFlags
	cf.register(fset, e)
	session := fset.String("session", "", "session ID (required)")
	pos, code, ok := parseInterleaved(fset, rest)
	if !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(e.stderr, "sandboxd files %s: "+format+"\n", append([]any{sub}, a...)...)
		return exitUsage
	}
	if *session == "" {
		return usageErr("--session is required")
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageErr("want SOURCE [DESTINATION]")
	}
	c := cf.client()
	switch sub {
	case "put":
		local := pos[0]
		remote := filepath.Base(local)
		if len(pos) == 2 {
			remote = pos[1]
		}
		fi, err := os.Stat(local)
		if err != nil {
			return usageErr("%v", err)
		}
		if fi.IsDir() {
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(writeTar(pw, local)) }()
			n, err := c.PutArchive(ctx, *session, remote, pr)
			pr.Close()
			if err != nil {
				return reportError(e, cf.url, err)
			}
			fmt.Fprintf(e.stderr, "uploaded %d entries to %s\n", n, remote)
			return exitOK
		}
		f, err := os.Open(local)
		if err != nil {
			return usageErr("%v", err)
		}
		defer f.Close()
		info, err := c.PutFile(ctx, *session, remote, f)
		if err != nil {
			return reportError(e, cf.url, err)
		}
		fmt.Fprintf(e.stderr, "uploaded %s (%d bytes)\n", info.Name, info.Size)
		return exitOK
	case "get":
		remote := pos[0]
		local := path.Base(strings.TrimRight(remote, "/"))
		if local == "/" || local == "." || local == "" {
			local = "workspace"
		}
		if len(pos) == 2 {
			local = pos[1]
		}
		rc, list, err := c.GetFile(ctx, *session, remote)
		if err != nil {
			return reportError(e, cf.url, err)
		}
		if list != nil { // a directory: fetch it as a tar and unpack it
			ar, err := c.GetArchive(ctx, *session, remote)
			if err != nil {
				return reportError(e, cf.url, err)
			}
			defer ar.Close()
			if local == "-" { // the archive itself, to stdout
				if _, err := io.Copy(e.stdout, ar); err != nil {
					fmt.Fprintf(e.stderr, "sandboxd files get: %v\n", err)
					return exitUnreachable
				}
				return exitOK
			}
			if err := readTar(ar, local); err != nil {
				fmt.Fprintf(e.stderr, "sandboxd files get: %v\n", err)
				return exitToolFailed
			}
			return exitOK
		}
		defer rc.Close()
		var w io.Writer = e.stdout
		if local != "-" {
			f, err := os.Create(local)
			if err != nil {
				return usageErr("%v", err)
			}
			defer f.Close()
			w = f
		}
		if _, err := io.Copy(w, rc); err != nil {
			fmt.Fprintf(e.stderr, "sandboxd files get: %v\n", err)
			return exitUnreachable
		}
		return exitOK
	default:
		fmt.Fprintf(e.stderr, "sandboxd files: unknown subcommand %q\n\n%s", sub, filesUsage)
		return exitUsage
	}
}

// writeTar writes the regular files and directories under dir as a tar
// (symlinks and special files are skipped: the server refuses them).
func writeTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || (!d.IsDir() && !d.Type().IsRegular()) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name, h.Uname, h.Gname, h.Uid, h.Gid = filepath.ToSlash(rel), "", "", 0, 0
		h.Mode &= 0o777
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, io.LimitReader(f, h.Size))
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// readTar unpacks regular files and directories into dir through os.Root
// (the server's archive is not trusted to stay inside dir).
func readTar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimLeft(h.Name, "/"))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return err
				}
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(h.Mode)&0o755|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}
