package kubernetes

import (
	"encoding/binary"
	"runtime"
	"slices"
	"sync"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/policy/seccompbpf"
	"github.com/sandboxd/sandboxd/tools"
)

// Two filters per sandbox. The agent listens on the pod network, so the
// pod's Localhost profile (the container's: the agent and everything it
// starts) is the policy's profile plus the inet socket families
// (agentProfile). The code's processes get the policy's profile itself
// stacked on top by the agent (--code-seccomp, the raw filter in the
// sandbox's Secret): the kernel applies both, the stricter answer wins,
// so the code has exactly the policy's filter.

// SeccompProfiles returns every Localhost profile the runner can name,
// by path relative to the kubelet's seccomp root (/var/lib/kubelet/seccomp)
// with dir as Config.SeccompDir: the agent's profile (agentProfile) of the
// runc and the gVisor profile of each effect set policy.Compile
// distinguishes. The cluster setup (or the installer DaemonSet) writes
// them on every node.
func SeccompProfiles(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	base := []tools.Effect{tools.EffectExec}
	for _, extra := range [][]tools.Effect{nil, {tools.EffectFileRead}, {tools.EffectFileWrite}, {tools.EffectHTTP},
		{tools.EffectFileRead, tools.EffectHTTP}, {tools.EffectFileWrite, tools.EffectHTTP}} {
		iso := policy.Compile(append(append([]tools.Effect(nil), base...), extra...)).Spec
		for _, p := range []bool{false, true} {
			s := iso.Seccomp
			if p {
				s = iso.SeccompGVisor
			}
			name, b, err := ProfileName(dir, agentProfile(s))
			if err != nil {
				return nil, err
			}
			out[name] = b
		}
	}
	return out, nil
}

// agentFamilies are the socket families the agent needs on top of the
// code's: TCP on the pod network (its listener, the reverse egress port).
var agentFamilies = []uint64{unix.AF_INET, unix.AF_INET6}

var agentProfiles sync.Map // *specs.LinuxSeccomp → *specs.LinuxSeccomp

// agentProfile is sc plus socket(2) of agentFamilies where sc does not
// allow them already; sc itself is not changed (policy's profiles are
// shared values).
func agentProfile(sc *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	if p, ok := agentProfiles.Load(sc); ok {
		return p.(*specs.LinuxSeccomp)
	}
	p := *sc
	p.Syscalls = slices.Clone(sc.Syscalls)
	for _, f := range agentFamilies {
		if allowsFamily(sc, f) {
			continue
		}
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: []string{"socket"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpMaskedEqual, Value: 0xffffffff, ValueTwo: f}}})
	}
	agentProfiles.Store(sc, &p)
	return &p
}

func allowsFamily(sc *specs.LinuxSeccomp, family uint64) bool {
	for _, s := range sc.Syscalls {
		if s.Action != specs.ActAllow || !slices.Contains(s.Names, "socket") {
			continue
		}
		if len(s.Args) == 0 {
			return true
		}
		if len(s.Args) == 1 && s.Args[0].Index == 0 && s.Args[0].Op == specs.OpMaskedEqual && s.Args[0].Value == 0xffffffff && s.Args[0].ValueTwo == family {
			return true
		}
	}
	return false
}

var codeFilters sync.Map // *specs.LinuxSeccomp → []byte

// codeFilter is sc compiled for this architecture (the nodes' must be
// sandboxd's) into the kernel's struct sock_filter array, as bytes: what
// the agent's --code-seccomp reads.
func codeFilter(sc *specs.LinuxSeccomp) ([]byte, error) {
	if b, ok := codeFilters.Load(sc); ok {
		return b.([]byte), nil
	}
	arch, err := seccompbpf.LookupArch(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	raw, err := seccompbpf.Assemble(sc, arch)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(raw)*8)
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	codeFilters.Store(sc, out)
	return out, nil
}
