package hostside

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
)

// The agent model (package policy) as every runner applies it (the local
// runner through its launcher, runner/local/launch):
// the container's process is the agent, as AgentUID:AgentGID with exactly
// AgentCapabilities (bounding, effective, permitted; inheritable and
// ambient empty) and no_new_privs; it runs the code as SandboxUID. The
// state directory bind-mounted at runner.AgentDir is the runner's (root),
// mode 0700: the agent reaches it as uid 0, sandboxd from the host, the
// code not at all.

// Paths inside the container.
const (
	AgentBinary = "/run/sandboxd-agent/sandbox-agent"
	AgentDir    = runner.AgentDir
	AgentSocket = runner.AgentSocketPath
)

// The agent's uid and gid inside the container.
const (
	AgentUID = policy.AgentUID
	AgentGID = policy.AgentUID
)

// AgentCapabilities are the agent's capabilities by name ("CAP_KILL").
func AgentCapabilities() []string { return policy.AgentCapabilityNames() }

// AgentArgs is the container's command line: AgentCommand under env -i
// (the agent passes its own environment to every process, and runtimes
// add HOME, and Docker HOSTNAME and the image's ENV).
func AgentArgs(egress bool) []string {
	return append([]string{"/usr/bin/env", "-i"}, AgentCommand(egress)...)
}

// AgentCommand is the agent's command line: serving on AgentSocket, file
// operations confined to the workspace, the code as SandboxUID, and with
// egress the proxy forwarder. The local runner's launcher execs it with an
// empty environment.
func AgentCommand(egress bool) []string {
	args := []string{AgentBinary, "--socket", AgentSocket, "--root", runner.WorkspaceDir,
		"--uid", fmt.Sprint(policy.CodeUID), "--gid", fmt.Sprint(policy.CodeGID)}
	if egress {
		args = append(args, "--egress-listen", runner.EgressProxyAddr, "--egress-socket", runner.EgressSocketPath)
	}
	return args
}

// MakeStateDir creates a sandbox's state directory, the one mounted at
// AgentDir: mode 0700 and the runner's own (root's), so that inside the
// sandbox only the agent (uid 0) can list, traverse or write it.
func MakeStateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700) // whatever the umask
}

// VerifyAgentProcess checks the host process pid (under runc, the
// container's process: the agent) against the agent model: uid and gid
// AgentUID, exactly AgentCapabilities in its bounding, effective and
// permitted sets, empty inheritable and ambient sets, no_new_privs.
func VerifyAgentProcess(pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err
	}
	f := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			f[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	var errs []error
	want := func(k, v string) {
		if f[k] != v {
			errs = append(errs, fmt.Errorf("%s %q, want %q", k, f[k], v))
		}
	}
	id := strings.TrimSpace(strings.Repeat(fmt.Sprint(AgentUID)+" ", 4))
	want("Uid", id)
	want("Gid", strings.TrimSpace(strings.Repeat(fmt.Sprint(AgentGID)+" ", 4)))
	caps := fmt.Sprintf("%016x", policy.AgentCapabilityMask())
	for _, k := range []string{"CapBnd", "CapEff", "CapPrm"} {
		want(k, caps)
	}
	want("CapInh", "0000000000000000")
	want("CapAmb", "0000000000000000")
	want("NoNewPrivs", "1")
	if len(errs) > 0 {
		return fmt.Errorf("agent process %d: %w", pid, errors.Join(errs...))
	}
	return nil
}

// VerifyStateDir checks a state directory is root's with mode 0700.
func VerifyStateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o700 || st.Uid != uint32(os.Geteuid()) || st.Uid == SandboxUID {
		return fmt.Errorf("state dir %s: mode %o uid %d, want 0700 and the runner's uid %d", dir, fi.Mode().Perm(), st.Uid, os.Geteuid())
	}
	return nil
}

// GVisorNProc is the RLIMIT_NPROC that enforces a sandbox's pids limit
// under gVisor, where the host pids cgroup counts runsc's own tasks
// instead: gVisor counts the limit per uid in its own kernel, so it bounds
// the code's processes (all SandboxUID); the agent, uid 0, is not among
// them and keeps one of the pids.
func GVisorNProc(pids int64) int64 { return max(pids-1, 1) }
