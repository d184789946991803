package seccompbpf

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// asm collects instructions with symbolic jump targets. Conditional jumps
// only ever skip zero or one instruction (the Jump after them), so their
// 8-bit offsets always fit; every real jump is an unconditional Jump with
// a 32-bit offset, resolved by resolve.
type asm struct {
	prog   []bpf.Instruction
	target map[int]string // index of a Jump → its label
	labels map[string]int // label → index of the instruction it names
	n      int            // for newLabel
}

func (a *asm) ins(i bpf.Instruction) { a.prog = append(a.prog, i) }

func (a *asm) ld(off uint32) { a.ins(bpf.LoadAbsolute{Off: off, Size: 4}) }

func (a *asm) ret(v uint32) { a.ins(bpf.RetConstant{Val: v}) }

// jump: goto l.
func (a *asm) jump(l string) {
	if a.target == nil {
		a.target = map[int]string{}
	}
	a.target[len(a.prog)] = l
	a.ins(bpf.Jump{})
}

// jumpIf: if A <op> k goto l.
func (a *asm) jumpIf(op bpf.JumpTest, k uint32, l string) {
	a.ins(bpf.JumpIf{Cond: op, Val: k, SkipTrue: 0, SkipFalse: 1})
	a.jump(l)
}

// jumpUnless: if !(A <op> k) goto l.
func (a *asm) jumpUnless(op bpf.JumpTest, k uint32, l string) {
	a.ins(bpf.JumpIf{Cond: op, Val: k, SkipTrue: 1, SkipFalse: 0})
	a.jump(l)
}

func (a *asm) newLabel() string {
	a.n++
	return fmt.Sprintf(".L%d", a.n)
}

// label names the next instruction.
func (a *asm) label(l string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[l] = len(a.prog)
}

// resolve fills in every Jump's offset.
func (a *asm) resolve() ([]bpf.Instruction, error) {
	for i, l := range a.target {
		to, ok := a.labels[l]
		if !ok || to <= i || to >= len(a.prog) {
			return nil, fmt.Errorf("jump %d to label %q (at %d) is not forward within the program", i, l, to)
		}
		a.prog[i] = bpf.Jump{Skip: uint32(to - i - 1)}
	}
	return a.prog, nil
}
