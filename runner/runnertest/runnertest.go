// Package runnertest is the conformance suite every runner.Runner backend
// (the fake included) must pass. Each isolation property is checked by
// attacking it; a subtest whose property the backend does not claim (per its
// Capabilities and the Factory's flags) is skipped with the reason, never
// passed silently.
//
// The suite runs host tools inside the sandbox: /bin/sh, coreutils and
// /usr/bin/python3 (override with Factory.Python).
package runnertest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// Factory describes the backend under test.
type Factory struct {
	// New returns the runner under test. It is called once per Run.
	New func(t *testing.T) runner.Runner
	// Leftovers reports what the sandbox with this ID left behind on the
	// host (processes, cgroups, directories, mounts). Every sandbox the
	// suite creates is checked after Close. nil: the check is skipped.
	Leftovers func(sandboxID string) []string
	// Python is the interpreter inside the sandbox. Default /usr/bin/python3.
	Python string
	// DropsPrivileges: commands run as a non-root uid with no capabilities
	// and no_new_privs.
	DropsPrivileges bool
	// KillsDaemons: processes that leave the command's process group or
	// session (setsid, nohup) die when the Exec ends. Implied by
	// Capabilities().PIDNamespace.
	KillsDaemons bool
	// PrivateRootView: the root is assembled from the host's system
	// directories only (no image), so /root, /home, /var/lib, /srv, /mnt
	// and /sys must be absent, not merely the image's own.
	PrivateRootView bool
	// KnownLeaks names attacks of the agent suite (by the name the
	// attack script prints, "list /proc/1/fdinfo") that this backend is
	// known to let through, with the reason: the suite logs them instead
	// of failing, and fails once one no longer succeeds (drop it then).
	KnownLeaks map[string]string
	// KnownGaps names whole subtests (Run's names, "DiskLimits") this
	// backend does not pass yet, with the reason: they are skipped with
	// that reason in the log, never silently. A gap is a missing
	// feature, not an attack that succeeds (those are KnownLeaks).
	KnownGaps map[string]string
}

type suite struct {
	f    Factory
	r    runner.Runner
	caps runner.Capabilities
}

// Run runs the conformance suite against the runner f.New returns.
func Run(t *testing.T, f Factory) {
	if f.Python == "" {
		f.Python = "/usr/bin/python3"
	}
	s := &suite{f: f, r: f.New(t)}
	s.caps = s.r.Capabilities()
	t.Logf("runner %q capabilities %+v", s.r.Name(), s.caps)
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Echo", s.testEcho},
		{"Stdin", s.testStdin},
		{"LongLived", s.testLongLived},
		{"EnvExact", s.testEnv},
		{"Threads", s.testThreads},
		{"ExitCodes", s.testExitCodes},
		{"Signal", s.testSignal},
		{"Timeout", s.testTimeout},
		{"CancelKills", s.testCancel},
		{"OutputCap", s.testOutputCap},
		{"ConcurrentExec", s.testConcurrentExec},
		{"NoExtraFDs", s.testFDs},
		{"WorkspaceReadWrite", s.testWorkspaceRW},
		{"WorkspacePersists", s.testWorkspacePersists},
		{"WorkspaceSync", s.testWorkspaceSync},
		{"WorkspaceReadOnly", s.testWorkspaceRO},
		{"WorkspaceNone", s.testWorkspaceNone},
		{"WorkspaceMountFlags", s.testWorkspaceMountFlags},
		{"DiskLimits", s.testDiskLimits},
		{"ReadOnlyRoot", s.testReadOnlyRoot},
		{"HostPathsHidden", s.testHostHidden},
		{"NoWriteOutsideWorkspace", s.testWriteOutside},
		{"NoNetwork", s.testNoNetwork},
		{"InetSocketDenied", s.testInetSocket},
		{"EgressRefused", s.testEgressRefused},
		{"Egress", s.testEgress},
		{"EgressNeedsEgress", s.testEgressNeedsEgress},
		{"HostProcessesInvisible", s.testProcesses},
		{"Unprivileged", s.testUnprivileged},
		{"NoPrivilegeRegain", s.testNoPrivilegeRegain},
		{"AgentPrivileges", s.testAgentPrivileges},
		{"AgentMemory", s.testAgentMemory},
		{"AgentPtrace", s.testAgentPtrace},
		{"AgentSignals", s.testAgentSignals},
		{"AgentSocket", s.testAgentSocket},
		{"AgentFilesOwned", s.testAgentFilesOwned},
		{"AgentFiles", s.testAgentFiles},
		{"Prestart", s.testPrestart},
		{"REPLState", s.testREPLState},
		{"REPLInterrupt", s.testREPLInterrupt},
		{"REPLArtifacts", s.testREPLArtifacts},
		{"SyscallAttacks", s.testSyscallAttacks},
		{"HighBitArgs", s.testHighBitArgs},
		{"IoctlCommands", s.testIoctlCommands},
		{"Clone3UserNS", s.testClone3UserNS},
		{"OOM", s.testOOM},
		{"PIDsLimit", s.testPIDs},
		{"ForkLoopKilled", s.testForkLoop},
		{"DaemonsKilled", s.testDaemons},
		{"IgnoredTermKilled", s.testTrapTerm},
		{"CloseReapsEverything", s.testClose},
		{"InvalidProcess", s.testInvalid},
		{"PolicyRows", s.testPolicyRows},
		{"NoIsolationRefused", s.testNoIsolation},
		{"MaskedPaths", s.testMaskedPaths},
	} {
		if why, gap := f.KnownGaps[tc.name]; gap {
			t.Run(tc.name, func(t *testing.T) { t.Skipf("known gap on runner %q: %s", s.r.Name(), why) })
			continue
		}
		t.Run(tc.name, tc.fn)
	}
}

// Isolation is the isolation policy.Compile gives a tool with the exec
// effect and the effects that make workspace mode ws (file_read,
// file_write) and network mode network (http): the specs of the suite,
// and of backend tests, are compiled as the job service compiles them.
func Isolation(ws runner.WorkspaceMode, network runner.NetworkMode) *runner.Isolation {
	effects := []tools.Effect{tools.EffectExec}
	switch ws {
	case runner.WorkspaceReadOnly:
		effects = append(effects, tools.EffectFileRead)
	case runner.WorkspaceReadWrite:
		effects = append(effects, tools.EffectFileWrite)
	}
	if network == runner.NetworkEgress {
		effects = append(effects, tools.EffectHTTP)
	}
	iso := policy.Compile(effects).Spec
	if iso.Workspace != ws || iso.Network != network {
		panic(fmt.Sprintf("runnertest: effects %v compile to %s/%s, not %s/%s", effects, iso.Workspace, iso.Network, ws, network))
	}
	return iso
}

// sandbox creates a sandbox, closed (and checked for leftovers) at
// cleanup. A spec without isolation gets exec's (no workspace, no
// network).
func (s *suite) sandbox(t *testing.T, spec runner.SandboxSpec) runner.Sandbox {
	t.Helper()
	if spec.Isolation == nil {
		spec.Isolation = Isolation(runner.WorkspaceNone, runner.NetworkNone)
	}
	sb, err := s.r.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sb.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		s.checkLeftovers(t, sb.ID())
	})
	return sb
}

// spec returns base for a sandbox with (http) or without the http effect;
// with it, every egress connection is refused.
func (s *suite) spec(t *testing.T, base runner.SandboxSpec, http bool) runner.SandboxSpec {
	t.Helper()
	ws := runner.WorkspaceNone
	if base.Isolation != nil {
		ws = base.Isolation.Workspace
	}
	base.Isolation = Isolation(ws, runner.NetworkNone)
	if http {
		s.need(t, s.caps.Network, "egress (http effect)")
		base.Isolation, base.Egress = Isolation(ws, runner.NetworkEgress), refuseEgress{}
	}
	return base
}

func (s *suite) checkLeftovers(t *testing.T, id string) {
	t.Helper()
	if s.f.Leftovers == nil {
		return
	}
	if left := s.f.Leftovers(id); len(left) > 0 {
		t.Errorf("sandbox %s left behind after Close: %v", id, left)
	}
}

func (s *suite) exec(t *testing.T, sb runner.Sandbox, p runner.Process) runner.Result {
	t.Helper()
	res, err := sb.Exec(t.Context(), p)
	if err != nil {
		t.Fatalf("Exec %q: %v", p.Args, err)
	}
	return res
}

func (s *suite) sh(t *testing.T, sb runner.Sandbox, script string) runner.Result {
	t.Helper()
	return s.exec(t, sb, runner.Process{Args: []string{"/bin/sh", "-c", script}, Timeout: 30 * time.Second})
}

func (s *suite) py(t *testing.T, sb runner.Sandbox, script string) runner.Result {
	t.Helper()
	return s.exec(t, sb, runner.Process{Args: []string{s.f.Python, "-c", script}, Timeout: 30 * time.Second})
}

func (s *suite) need(t *testing.T, have bool, what string) {
	t.Helper()
	if !have {
		t.Skipf("runner %q does not provide %s", s.r.Name(), what)
	}
}

func mustOK(t *testing.T, res runner.Result) {
	t.Helper()
	if res.ExitCode != 0 || res.Signal != "" {
		t.Fatalf("exit %d signal %q\nstdout: %s\nstderr: %s", res.ExitCode, res.Signal, res.Stdout, res.Stderr)
	}
}

// hostProcsMatching lists host processes whose command line contains token.
func hostProcsMatching(token string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, token) {
			out = append(out, e.Name()+": "+cmd)
		}
	}
	return out
}

// waitNoProcs polls until no host process matches token.
func waitNoProcs(t *testing.T, token string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := hostProcsMatching(token)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes still running: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// token returns a unique sleep duration that identifies a test's processes.
func token() string {
	n := time.Now().UnixNano()
	return fmt.Sprintf("%d.%09d", 5000+n%1000, n%1_000_000_000)
}
