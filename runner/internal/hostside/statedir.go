package hostside

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/runner"
)

// A container runner's host state lives in its StateDir, which several
// runner instances (sandboxd processes) may share:
//
//	StateDir/<InstanceID>/owner       the owning process, as ProcIdentity
//	StateDir/<InstanceID>/<sandbox>/  one directory per sandbox (its agent
//	                                  and egress sockets, in sub)
//
// An instance removes its own sandbox directories that no open sandbox
// holds, and another instance's directory only when the owner record
// names a dead process: never by age, never without a record.

// OwnerRecord is the file in an instance's directory naming its owner.
const OwnerRecord = "owner"

// MaxSocketPath is the longest unix socket path the kernel takes: sun_path
// is 108 bytes with its terminating NUL.
const MaxSocketPath = 107

// MinIDRoom is the sandbox ID length a StateDir must leave room for: the
// job service's IDs are 31 characters ("pool_" and 26), hostside's own 16.
const MinIDRoom = 32

// socketNames are the sockets in a sandbox's socket directory.
var socketNames = []string{filepath.Base(runner.AgentSocketPath), filepath.Base(runner.EgressSocketPath)}

// StateRoot is one runner instance's part of a StateDir.
type StateRoot struct {
	Base string // the StateDir
	Dir  string // Base/<InstanceID>
	sub  string // a sandbox's socket directory inside its own ("" or "run")
	room int    // the longest sandbox ID whose sockets fit MaxSocketPath
}

// OpenStateRoot creates base/instance (mode 0711: the daemon and runtimes
// traverse it, nobody lists it) and its owner record, this process. sub is
// where a sandbox's sockets live inside its directory. It refuses, naming
// name, a base too long for sockets of sandbox IDs of MinIDRoom
// characters, and an instance directory whose recorded owner is another
// live process.
func OpenStateRoot(name, base, instance, sub string) (*StateRoot, error) {
	s := &StateRoot{Base: base, Dir: filepath.Join(base, instance), sub: sub}
	s.room = MaxSocketPath - (len(s.socketPath("x")) - 1)
	if s.room < MinIDRoom {
		example := s.socketPath(strings.Repeat("x", MinIDRoom))
		return nil, fmt.Errorf("%s: state dir %s is too long for the sandboxes' unix sockets: %s is %d bytes, over the kernel's limit of %d; use a shorter data dir (or StateDir)",
			name, base, example, len(example), MaxSocketPath)
	}
	if err := os.MkdirAll(s.Dir, 0o711); err != nil {
		return nil, fmt.Errorf("%s: state dir: %w", name, err)
	}
	os.Chmod(base, 0o711)
	if b, err := os.ReadFile(filepath.Join(s.Dir, OwnerRecord)); err == nil {
		rec := strings.TrimSpace(string(b))
		if alive, _ := OwnerAlive(rec); alive && rec != SelfProc() {
			return nil, fmt.Errorf("%s: state dir %s belongs to another live process (%s): give each runner its own InstanceID", name, s.Dir, rec)
		}
	}
	if err := s.writeOwner(); err != nil {
		return nil, fmt.Errorf("%s: state dir: %w", name, err)
	}
	return s, nil
}

// socketPath is the longest socket path of sandbox id.
func (s *StateRoot) socketPath(id string) string {
	longest := ""
	for _, n := range socketNames {
		if len(n) > len(longest) {
			longest = n
		}
	}
	return filepath.Join(s.Dir, id, s.sub) + "/" + longest
}

func (s *StateRoot) writeOwner() error {
	tmp := filepath.Join(s.Dir, OwnerRecord+".tmp")
	if err := os.WriteFile(tmp, []byte(SelfProc()+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.Dir, OwnerRecord))
}

// Sandbox is the directory of sandbox id.
func (s *StateRoot) Sandbox(id string) string { return filepath.Join(s.Dir, id) }

// CheckID refuses (runner.ErrInvalidSpec) a sandbox ID whose sockets would
// not fit MaxSocketPath.
func (s *StateRoot) CheckID(id string) error {
	if len(id) > s.room {
		return fmt.Errorf("create sandbox: id %q is longer than the %d characters its socket path %s leaves: %w",
			id, s.room, s.socketPath(id), runner.ErrInvalidSpec)
	}
	return nil
}

// Reap removes, with remove (which must also undo what the runner mounted
// inside), this instance's sandbox directories that held does not claim
// and the directories of other instances whose owner record names a dead
// process, unless keep names them (they still own live sandboxes). An
// instance without a readable record is left alone.
func (s *StateRoot) Reap(held func(id string) bool, keep map[string]bool, remove func(dir string) error) error {
	var errs []error
	ents, err := os.ReadDir(s.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("read state dir: %w", err))
	}
	for _, e := range ents {
		if e.IsDir() && !held(e.Name()) {
			errs = append(errs, remove(filepath.Join(s.Dir, e.Name())))
		}
	}
	others, err := os.ReadDir(s.Base)
	if err != nil {
		errs = append(errs, fmt.Errorf("read state dir: %w", err))
	}
	for _, e := range others {
		if !e.IsDir() || e.Name() == filepath.Base(s.Dir) || keep[e.Name()] {
			continue
		}
		dir := filepath.Join(s.Base, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, OwnerRecord))
		if err != nil {
			continue
		}
		if alive, known := OwnerAlive(strings.TrimSpace(string(b))); known && !alive {
			errs = append(errs, remove(dir))
		}
	}
	return errors.Join(errs...)
}

// Close removes the owner record and the instance directory when no
// sandbox directory is left in it (open sandboxes keep both: once this
// process is gone, the record says so).
func (s *StateRoot) Close() {
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			return
		}
	}
	os.Remove(filepath.Join(s.Dir, OwnerRecord))
	os.Remove(s.Dir)
}
