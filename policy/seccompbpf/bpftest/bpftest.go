// Package bpftest checks compiled seccomp programs without a kernel: Eval
// is what an OCI profile means, written directly from the OCI and
// libseccomp semantics (independent of the compiler), and Run executes a
// program in golang.org/x/net/bpf's VM. A compiled program must give
// Run == Eval on every input.
package bpftest

import (
	"encoding/binary"
	"fmt"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"

	"github.com/sandboxd/sandboxd/policy/seccompbpf"
)

// Data is one struct seccomp_data.
type Data struct {
	Nr   uint32
	Arch uint32
	Args [6]uint64
}

// x32SyscallBit marks x32 syscall numbers on x86_64.
const x32SyscallBit = 0x40000000

// Eval returns the SECCOMP_RET_* value the kernel must answer for d under
// p on arch: a foreign ABI (or x32) kills the process; else the first rule
// naming d's syscall whose conditions all hold; else the default.
func Eval(p *specs.LinuxSeccomp, arch *seccompbpf.Arch, d Data) (uint32, error) {
	if d.Arch != arch.Audit {
		return seccompbpf.RetKillProcess, nil
	}
	if arch.X32 && d.Nr >= x32SyscallBit && d.Nr != 0xffffffff {
		return seccompbpf.RetKillProcess, nil
	}
	for _, sc := range p.Syscalls {
		for _, name := range sc.Names {
			if nr, ok := arch.Syscall(name); !ok || nr != d.Nr {
				continue
			}
			if !holds(sc.Args, d.Args) {
				continue
			}
			return seccompbpf.Action(sc.Action, sc.ErrnoRet)
		}
	}
	return seccompbpf.Action(p.DefaultAction, p.DefaultErrnoRet)
}

func holds(conds []specs.LinuxSeccompArg, args [6]uint64) bool {
	for _, c := range conds {
		v := args[c.Index]
		var ok bool
		switch c.Op {
		case specs.OpEqualTo:
			ok = v == c.Value
		case specs.OpNotEqual:
			ok = v != c.Value
		case specs.OpLessThan:
			ok = v < c.Value
		case specs.OpLessEqual:
			ok = v <= c.Value
		case specs.OpGreaterThan:
			ok = v > c.Value
		case specs.OpGreaterEqual:
			ok = v >= c.Value
		case specs.OpMaskedEqual:
			ok = v&c.Value == c.ValueTwo
		}
		if !ok {
			return false
		}
	}
	return true
}

// VM runs one compiled program.
type VM struct{ vm *bpf.VM }

// NewVM loads prog after a round trip through the raw encoding the kernel
// gets.
func NewVM(prog []bpf.Instruction) (*VM, error) {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	back, ok := bpf.Disassemble(raw)
	if !ok {
		return nil, fmt.Errorf("program does not disassemble")
	}
	vm, err := bpf.NewVM(back)
	if err != nil {
		return nil, err
	}
	return &VM{vm}, nil
}

// Run returns the program's answer for d. The VM loads words big-endian,
// the kernel in the machine's order: the buffer holds each 32-bit word
// big-endian at its offset in a little-endian seccomp_data.
func (v *VM) Run(d Data) (uint32, error) {
	var buf [64]byte
	binary.BigEndian.PutUint32(buf[0:], d.Nr)
	binary.BigEndian.PutUint32(buf[4:], d.Arch)
	for i, a := range d.Args {
		binary.BigEndian.PutUint32(buf[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(buf[16+8*i+4:], uint32(a>>32))
	}
	out, err := v.vm.Run(buf[:])
	return uint32(out), err
}

// Disasm renders prog one numbered instruction per line.
func Disasm(prog []bpf.Instruction) string {
	var b []byte
	for i, ins := range prog {
		b = fmt.Appendf(b, "%4d  %v\n", i, ins)
	}
	return string(b)
}
