package seccompbpf_test

import (
	"math/rand/v2"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"

	"github.com/sandboxd/sandboxd/policy/seccompbpf"
	"github.com/sandboxd/sandboxd/policy/seccompbpf/bpftest"
)

const x32SyscallBit = 0x40000000

func eval(t testing.TB, p *specs.LinuxSeccomp, arch *seccompbpf.Arch, d bpftest.Data) uint32 {
	t.Helper()
	ret, err := bpftest.Eval(p, arch, d)
	if err != nil {
		t.Fatal(err)
	}
	return ret
}

func run(t testing.TB, prog []bpf.Instruction, d bpftest.Data) uint32 {
	t.Helper()
	vm, err := bpftest.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	ret, err := vm.Run(d)
	if err != nil {
		t.Fatal(err)
	}
	return ret
}

var ops = []specs.LinuxSeccompOperator{specs.OpEqualTo, specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual,
	specs.OpGreaterThan, specs.OpGreaterEqual, specs.OpMaskedEqual}

// interesting values: word boundaries, where off-by-one and word-order
// mistakes show.
var edges = []uint64{0, 1, 2, 0x7fffffff, 0x80000000, 0xffffffff, 1 << 32, 1<<32 | 1, 0xffffffff00000000, 0xfffffffffffffffe, ^uint64(0), 0x100000000, 0x5412, 0x100005412}

func value(r *rand.Rand) uint64 {
	switch r.IntN(4) {
	case 0:
		return edges[r.IntN(len(edges))]
	case 1:
		return r.Uint64N(8)
	case 2:
		return uint64(r.Uint32())
	}
	return r.Uint64()
}

// randomProfile builds a profile over a few amd64 syscalls (read=0,
// write=1, open=2, close=3, socket=41, ioctl=16) with random rules.
func randomProfile(r *rand.Rand) *specs.LinuxSeccomp {
	names := []string{"read", "write", "open", "close", "socket", "ioctl", "no_such_syscall"}
	actions := []specs.LinuxSeccompAction{specs.ActAllow, specs.ActErrno, specs.ActKillProcess, specs.ActTrap, specs.ActLog, specs.ActKill}
	errno := func() *uint {
		if r.IntN(3) == 0 {
			return nil
		}
		e := uint(r.IntN(200))
		return &e
	}
	p := &specs.LinuxSeccomp{DefaultAction: actions[r.IntN(len(actions))], DefaultErrnoRet: errno(), Architectures: []specs.Arch{specs.ArchX86_64}}
	for range r.IntN(8) {
		sc := specs.LinuxSyscall{Action: actions[r.IntN(len(actions))], ErrnoRet: errno()}
		for range 1 + r.IntN(2) {
			sc.Names = append(sc.Names, names[r.IntN(len(names))])
		}
		for _, idx := range r.Perm(6)[:r.IntN(3)] {
			c := specs.LinuxSeccompArg{Index: uint(idx), Op: ops[r.IntN(len(ops))], Value: value(r)}
			if c.Op == specs.OpMaskedEqual {
				c.ValueTwo = value(r)
				if r.IntN(2) == 0 {
					c.ValueTwo &= c.Value // mostly satisfiable
				}
			}
			sc.Args = append(sc.Args, c)
		}
		p.Syscalls = append(p.Syscalls, sc)
	}
	return p
}

// randomData draws seccomp_data near p's rules: their syscalls and
// arguments at, next to and around their condition values.
func randomData(r *rand.Rand, p *specs.LinuxSeccomp, arch *seccompbpf.Arch) bpftest.Data {
	d := bpftest.Data{Arch: arch.Audit}
	switch r.IntN(20) {
	case 0:
		d.Arch = r.Uint32()
	case 1:
		d.Arch = 0x40000003 // i386
	}
	nrs := []uint32{0, 1, 2, 3, 16, 41, 500, 0xffffffff, x32SyscallBit | 1, x32SyscallBit | 41, r.Uint32()}
	d.Nr = nrs[r.IntN(len(nrs))]
	var near []uint64
	for _, sc := range p.Syscalls {
		for _, c := range sc.Args {
			near = append(near, c.Value, c.Value+1, c.Value-1, c.ValueTwo, c.ValueTwo|c.Value, c.Value^1<<32)
		}
	}
	for i := range d.Args {
		if len(near) > 0 && r.IntN(2) == 0 {
			d.Args[i] = near[r.IntN(len(near))]
		} else {
			d.Args[i] = value(r)
		}
	}
	return d
}

// TestCompileMatchesEval compiles random profiles and runs each in the
// BPF VM against a direct evaluation of the profile.
func TestCompileMatchesEval(t *testing.T) {
	t.Parallel()
	arch, _ := seccompbpf.LookupArch("amd64")
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		p := randomProfile(r)
		checkProfile(t, r, p, arch, 200, i)
		if t.Failed() {
			return
		}
	}
}

func checkProfile(t *testing.T, r *rand.Rand, p *specs.LinuxSeccomp, arch *seccompbpf.Arch, inputs, i int) {
	t.Helper()
	prog, err := seccompbpf.Compile(p, arch)
	if err != nil {
		t.Fatalf("profile %d: %v\n%+v", i, err, p)
	}
	vm, err := bpftest.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	for range inputs {
		d := randomData(r, p, arch)
		got, err := vm.Run(d)
		if err != nil {
			t.Fatal(err)
		}
		if want := eval(t, p, arch, d); got != want {
			t.Fatalf("profile %d %+v\ninput %+v: program returned %#x, the profile says %#x\n%s", i, p, d, got, want, bpftest.Disasm(prog))
		}
	}
}

// FuzzCompile: the fuzzer's bytes seed a profile and its inputs.
func FuzzCompile(f *testing.F) {
	f.Add(uint64(0), uint64(0))
	f.Add(uint64(1), uint64(0x5412))
	f.Add(uint64(0xdeadbeef), uint64(1<<32))
	arch, _ := seccompbpf.LookupArch("amd64")
	f.Fuzz(func(t *testing.T, a, b uint64) {
		r := rand.New(rand.NewPCG(a, b))
		checkProfile(t, r, randomProfile(r), arch, 50, 0)
	})
}

// Many syscalls: the search spans more than a conditional jump's 255
// instructions, and every named syscall is still found.
func TestCompileLargeProfile(t *testing.T) {
	t.Parallel()
	arch, _ := seccompbpf.LookupArch("amd64")
	names := arch.Names()
	p := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Architectures: []specs.Arch{specs.ArchX86_64},
		Syscalls: []specs.LinuxSyscall{{Names: names, Action: specs.ActAllow}}}
	prog, err := seccompbpf.Compile(p, arch)
	if err != nil {
		t.Fatal(err)
	}
	if len(prog) < 600 {
		t.Fatalf("only %d instructions: the test does not exercise long jumps", len(prog))
	}
	for nr := uint32(0); nr < 1000; nr++ {
		d := bpftest.Data{Nr: nr, Arch: arch.Audit}
		if got, want := run(t, prog, d), eval(t, p, arch, d); got != want {
			t.Fatalf("syscall %d: %#x, want %#x", nr, got, want)
		}
	}
}

func TestCompileRefuses(t *testing.T) {
	t.Parallel()
	arch, _ := seccompbpf.LookupArch("amd64")
	for name, p := range map[string]*specs.LinuxSeccomp{
		"foreign arch":  {DefaultAction: specs.ActErrno, Architectures: []specs.Arch{specs.ArchX86_64, specs.ArchX86}},
		"bad default":   {DefaultAction: "SCMP_ACT_BOGUS"},
		"notify":        {DefaultAction: specs.ActNotify},
		"listener":      {DefaultAction: specs.ActErrno, ListenerPath: "/run/x"},
		"flag":          {DefaultAction: specs.ActErrno, Flags: []specs.LinuxSeccompFlag{"SECCOMP_FILTER_FLAG_LOG"}},
		"errno range":   {DefaultAction: specs.ActErrno, DefaultErrnoRet: ptr(uint(5000))},
		"bad index":     {DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 6, Op: specs.OpEqualTo}}}}},
		"bad op":        {DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Op: "SCMP_CMP_BOGUS"}}}}},
		"same argument": {DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"ioctl"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 1, Op: specs.OpNotEqual, Value: 1}, {Index: 1, Op: specs.OpNotEqual, Value: 2}}}}},
		"no profile":    nil,
	} {
		if _, err := seccompbpf.Compile(p, arch); err == nil {
			t.Errorf("%s: compiled", name)
		}
	}
	if _, err := seccompbpf.LookupArch("mips"); err == nil {
		t.Error("seccompbpf.LookupArch(mips) succeeded")
	}
}

func ptr[T any](v T) *T { return &v }
