// Package seccompbpf compiles an OCI seccomp profile (the form runc and
// gVisor load) into a classic BPF program the kernel accepts with
// seccomp(SECCOMP_SET_MODE_FILTER), so that a sandbox without a container
// runtime runs under exactly the profile the containers get. It depends on
// nothing but the runtime-spec types and golang.org/x/net/bpf, so runners
// import it without importing package policy.
//
// The program, for one architecture:
//
//  1. a syscall of any other ABI (seccomp_data.arch differs) kills the
//     process; on x86_64 so does an x32 syscall (bit 30 of the number set:
//     any number from 0x40000000 up but -1, as libseccomp does);
//  2. the syscall number is found by a binary search over the numbers the
//     profile names (names the architecture lacks are skipped, as runc and
//     gVisor skip them);
//  3. the syscall's rules are tried in profile order: the first whose
//     argument conditions all hold (AND) decides;
//  4. otherwise the profile's default action.
//
// Arguments are compared as the 64-bit values OCI defines (libseccomp's
// semantics): each condition looks at the high and low 32-bit words its
// operator needs. A profile that means "the low 32 bits" says so with
// SCMP_CMP_MASKED_EQ and a mask within 0xffffffff.
//
// A rule with two conditions on the same argument is refused: runc and
// gVisor OR such conditions (a legacy of runc), this compiler would AND
// them, and a profile must mean one thing everywhere.
package seccompbpf

import (
	"errors"
	"fmt"
	"slices"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
)

// SECCOMP_RET_* values.
const (
	RetKillProcess = 0x80000000
	RetKillThread  = 0x00000000
	RetTrap        = 0x00030000
	RetErrno       = 0x00050000
	RetTrace       = 0x7ff00000
	RetLog         = 0x7ffc0000
	RetAllow       = 0x7fff0000
)

// maxInstructions is the kernel's BPF_MAXINSNS.
const maxInstructions = 4096

// Offsets in struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// Action returns the SECCOMP_RET_* value of an OCI action with errno (nil:
// EPERM, as OCI defines).
func Action(a specs.LinuxSeccompAction, errno *uint) (uint32, error) {
	e := uint(1) // EPERM
	if errno != nil {
		e = *errno
	}
	switch a {
	case specs.ActAllow:
		return RetAllow, nil
	case specs.ActErrno, specs.ActTrace:
		if e > 4095 {
			return 0, fmt.Errorf("errno %d out of range", e)
		}
		if a == specs.ActTrace {
			return RetTrace | uint32(e), nil
		}
		return RetErrno | uint32(e), nil
	case specs.ActKill, specs.ActKillThread:
		return RetKillThread, nil
	case specs.ActKillProcess:
		return RetKillProcess, nil
	case specs.ActTrap:
		return RetTrap, nil
	case specs.ActLog:
		return RetLog, nil
	}
	return 0, fmt.Errorf("action %q not supported", a)
}

// rule is one OCI rule as it applies to one syscall.
type rule struct {
	ret  uint32
	args []specs.LinuxSeccompArg
}

// Compile compiles p for arch into a BPF program (see the package comment).
func Compile(p *specs.LinuxSeccomp, arch *Arch) ([]bpf.Instruction, error) {
	if p == nil {
		return nil, errors.New("seccompbpf: no profile")
	}
	for _, a := range p.Architectures {
		if a != arch.OCI {
			return nil, fmt.Errorf("seccompbpf: profile allows architecture %s; only the native %s is compiled (foreign ABIs are killed)", a, arch.OCI)
		}
	}
	for _, f := range p.Flags {
		if f != "SECCOMP_FILTER_FLAG_TSYNC" {
			return nil, fmt.Errorf("seccompbpf: flag %s not supported", f)
		}
	}
	if p.ListenerPath != "" {
		return nil, errors.New("seccompbpf: a notify listener is not supported")
	}
	def, err := Action(p.DefaultAction, p.DefaultErrnoRet)
	if err != nil {
		return nil, fmt.Errorf("seccompbpf: default action: %w", err)
	}
	rules := map[uint32][]rule{}
	for i, sc := range p.Syscalls {
		ret, err := Action(sc.Action, sc.ErrnoRet)
		if err != nil {
			return nil, fmt.Errorf("seccompbpf: rule %d %v: %w", i, sc.Names, err)
		}
		if err := checkArgs(sc.Args); err != nil {
			return nil, fmt.Errorf("seccompbpf: rule %d %v: %w", i, sc.Names, err)
		}
		for _, name := range sc.Names {
			nr, ok := arch.Syscall(name)
			if !ok {
				continue // not on this architecture (runc and gVisor skip it too)
			}
			rules[nr] = append(rules[nr], rule{ret: ret, args: sc.Args})
		}
	}

	var a asm
	// 1. The native ABI only.
	a.ld(offArch)
	a.jumpUnless(bpf.JumpEqual, arch.Audit, "badarch")
	a.ld(offNr)
	if arch.X32 {
		a.jumpIf(bpf.JumpEqual, 0xffffffff, "dispatch")
		a.jumpIf(bpf.JumpGreaterOrEqual, x32SyscallBit, "badarch")
	}
	a.label("dispatch")
	// 2. Binary search over the syscall numbers (A holds the number).
	nrs := make([]uint32, 0, len(rules))
	for nr := range rules {
		nrs = append(nrs, nr)
	}
	slices.Sort(nrs)
	a.search(nrs, rules)
	// 3. Each syscall's rules, then 4. the default.
	for _, nr := range nrs {
		if single(rules[nr]) {
			continue // returned in the search's leaf
		}
		a.label(sysLabel(nr))
		for i, r := range rules[nr] {
			next := fmt.Sprintf("sys%d.rule%d", nr, i+1)
			for _, c := range r.args {
				a.cond(c, next)
			}
			a.ret(r.ret)
			a.label(next)
		}
		a.ret(def)
	}
	a.label("default")
	a.ret(def)
	a.label("badarch")
	a.ret(RetKillProcess)
	prog, err := a.resolve()
	if err != nil {
		return nil, fmt.Errorf("seccompbpf: %w", err)
	}
	if len(prog) > maxInstructions {
		return nil, fmt.Errorf("seccompbpf: program has %d instructions, the kernel takes %d", len(prog), maxInstructions)
	}
	return prog, nil
}

// Assemble is Compile followed by bpf.Assemble: the raw program, each
// instruction the kernel's struct sock_filter.
func Assemble(p *specs.LinuxSeccomp, arch *Arch) ([]bpf.RawInstruction, error) {
	prog, err := Compile(p, arch)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccompbpf: %w", err)
	}
	return raw, nil
}

func checkArgs(args []specs.LinuxSeccompArg) error {
	var seen [6]bool
	for _, c := range args {
		if c.Index >= 6 {
			return fmt.Errorf("argument index %d out of range", c.Index)
		}
		if seen[c.Index] {
			return fmt.Errorf("two conditions on argument %d (runc and gVisor OR them, this compiler would AND them): split the rule", c.Index)
		}
		seen[c.Index] = true
		switch c.Op {
		case specs.OpEqualTo, specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual,
			specs.OpGreaterThan, specs.OpGreaterEqual, specs.OpMaskedEqual:
		default:
			return fmt.Errorf("operator %q not supported", c.Op)
		}
	}
	return nil
}

// single: the syscall's only rule is unconditional, so the search's leaf
// returns its action directly.
func single(rs []rule) bool { return len(rs) == 1 && len(rs[0].args) == 0 }

func sysLabel(nr uint32) string { return fmt.Sprintf("sys%d", nr) }

// leafSize is how many syscall numbers a search leaf compares one by one.
const leafSize = 4

// search emits a binary search over nrs (sorted), A holding the syscall
// number; each leaf returns or jumps to the syscall's rules, and a number
// not found goes to the default.
func (a *asm) search(nrs []uint32, rules map[uint32][]rule) {
	if len(nrs) <= leafSize {
		for _, nr := range nrs {
			if rs := rules[nr]; single(rs) {
				a.ins(bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: 1})
				a.ret(rs[0].ret)
			} else {
				a.jumpIf(bpf.JumpEqual, nr, sysLabel(nr))
			}
		}
		a.jump("default")
		return
	}
	mid := len(nrs) / 2
	right := a.newLabel()
	a.jumpIf(bpf.JumpGreaterOrEqual, nrs[mid], right)
	a.search(nrs[:mid], rules)
	a.label(right)
	a.search(nrs[mid:], rules)
}

// cond emits the test of one argument condition: it falls through when the
// condition holds and jumps to fail when not. A is clobbered.
func (a *asm) cond(c specs.LinuxSeccompArg, fail string) {
	lo, hi := uint32(offArgs+8*c.Index), uint32(offArgs+8*c.Index+4) // little-endian
	vlo, vhi := uint32(c.Value), uint32(c.Value>>32)
	pass := a.newLabel()
	switch c.Op {
	case specs.OpMaskedEqual:
		// (arg & Value) == ValueTwo, word by word.
		dlo, dhi := uint32(c.ValueTwo), uint32(c.ValueTwo>>32)
		for _, w := range []struct{ off, mask, datum uint32 }{{hi, vhi, dhi}, {lo, vlo, dlo}} {
			switch {
			case w.mask == 0 && w.datum == 0:
				// Always true: no test.
			case w.datum&^w.mask != 0:
				a.jump(fail) // never true
			default:
				a.ld(w.off)
				if w.mask != 0xffffffff {
					a.ins(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: w.mask})
				}
				a.jumpUnless(bpf.JumpEqual, w.datum, fail)
			}
		}
	case specs.OpEqualTo:
		a.ld(hi)
		a.jumpUnless(bpf.JumpEqual, vhi, fail)
		a.ld(lo)
		a.jumpUnless(bpf.JumpEqual, vlo, fail)
	case specs.OpNotEqual:
		a.ld(hi)
		a.jumpUnless(bpf.JumpEqual, vhi, pass)
		a.ld(lo)
		a.jumpIf(bpf.JumpEqual, vlo, fail)
	case specs.OpGreaterThan, specs.OpGreaterEqual:
		// hi > vhi, or hi == vhi and lo > (>=) vlo.
		a.ld(hi)
		a.jumpIf(bpf.JumpGreaterThan, vhi, pass)
		a.jumpUnless(bpf.JumpEqual, vhi, fail)
		a.ld(lo)
		op := bpf.JumpGreaterThan
		if c.Op == specs.OpGreaterEqual {
			op = bpf.JumpGreaterOrEqual
		}
		a.jumpUnless(op, vlo, fail)
	case specs.OpLessThan, specs.OpLessEqual:
		// hi < vhi, or hi == vhi and lo < (<=) vlo.
		a.ld(hi)
		a.jumpUnless(bpf.JumpGreaterOrEqual, vhi, pass)
		a.jumpUnless(bpf.JumpEqual, vhi, fail)
		a.ld(lo)
		op := bpf.JumpGreaterOrEqual // lo >= vlo fails LT
		if c.Op == specs.OpLessEqual {
			op = bpf.JumpGreaterThan // lo > vlo fails LE
		}
		a.jumpIf(op, vlo, fail)
	}
	a.label(pass)
}
