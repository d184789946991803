// Package policy decides what a tool call may do and how it is isolated:
// the effect → isolation table (Compile, Table; this file) with the one
// seccomp policy every runner applies (seccomp.go: the one file where a
// sandbox's seccomp profile is decided; runners only apply it), the agent
// model (the agent's and the code's uid and capabilities), tenant policy,
// and the guard (decisions, budgets, rate limits, approvals).
package policy

import (
	"slices"
	"sync"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// Isolation is what a call of one tool gets, compiled from its effect tags.
type Isolation struct {
	// Sandbox is false for tools without the exec effect: they run
	// in-process and no sandbox is created.
	Sandbox bool
	// Spec is the sandbox's isolation as the runners receive it
	// (runner.SandboxSpec.Isolation): workspace and network mode, seccomp
	// profile, masked paths. Set whether or not Sandbox is. Shared by
	// every call compiled to the same isolation (compare by pointer);
	// never modify it.
	Spec *runner.Isolation
}

// Compile maps a tool's effects to its isolation. It is the code form of
// Table, and the one place a sandbox's isolation is decided.
func Compile(effects []tools.Effect) Isolation {
	has := func(e tools.Effect) bool { return slices.Contains(effects, e) }
	ws, network := runner.WorkspaceNone, runner.NetworkNone
	switch {
	case has(tools.EffectFileWrite):
		ws = runner.WorkspaceReadWrite
	case has(tools.EffectFileRead):
		ws = runner.WorkspaceReadOnly
	}
	if has(tools.EffectHTTP) {
		network = runner.NetworkEgress
	}
	return Isolation{Sandbox: has(tools.EffectExec), Spec: compiled()[isoKey{ws, network}]}
}

type isoKey struct {
	ws      runner.WorkspaceMode
	network runner.NetworkMode
}

// compiled holds one shared runner.Isolation per workspace and network
// mode, built once.
var compiled = sync.OnceValue(func() map[isoKey]*runner.Isolation {
	out := map[isoKey]*runner.Isolation{}
	for _, network := range []runner.NetworkMode{runner.NetworkNone, runner.NetworkEgress} {
		// The http effect (NetworkEgress) adds the inet socket families:
		// programs reach the egress proxy on the sandbox's loopback;
		// with no route, nothing else answers.
		sc := nativeProfile(network == runner.NetworkEgress)
		gv := seccompGVisor(sc)
		for _, ws := range []runner.WorkspaceMode{runner.WorkspaceNone, runner.WorkspaceReadOnly, runner.WorkspaceReadWrite} {
			out[isoKey{ws, network}] = &runner.Isolation{
				Workspace: ws, Network: network,
				Seccomp: sc, SeccompGVisor: gv,
				MaskedPaths: maskedPaths, ReadonlyPaths: readonlyPaths,
			}
		}
	}
	return out
})

// maskedPaths and readonlyPaths are kernel interfaces no sandbox may read
// or write: Docker's defaults and what the local runner masked besides.
// A masked directory becomes an empty read-only tmpfs, a masked file
// /dev/null; paths a sandbox lacks are skipped.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/config.gz", "/proc/driver", "/proc/interrupts",
		"/proc/kcore", "/proc/keys", "/proc/kmsg", "/proc/kpagecgroup", "/proc/kpagecount",
		"/proc/kpageflags", "/proc/latency_stats", "/proc/mtrr", "/proc/pagetypeinfo",
		"/proc/sched_debug", "/proc/scsi", "/proc/timer_list", "/proc/timer_stats",
		"/proc/vmallocinfo", "/sys/devices/virtual/powercap", "/sys/firmware",
	}
	readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)
