package seccompbpf

import (
	"fmt"

	"github.com/opencontainers/runtime-spec/specs-go"
)

//go:generate go run mksysnum.go

// Arch is a target the compiler knows: the audit architecture the kernel
// reports in seccomp_data.arch, the OCI name, and its syscall table.
type Arch struct {
	GOARCH string
	// Audit is AUDIT_ARCH_* of the native 64-bit ABI.
	Audit uint32
	// OCI is the architecture's name in OCI and Docker profiles.
	OCI specs.Arch
	// X32 is set where a second ABI shares Audit and marks its syscall
	// numbers with bit 30 (x86_64's x32): those are refused like any
	// foreign ABI.
	X32 bool
	// table maps syscall names to numbers.
	table map[string]uint32
}

const x32SyscallBit = 0x40000000

var archs = map[string]*Arch{
	"amd64": {GOARCH: "amd64", Audit: 0xc000003e, OCI: specs.ArchX86_64, X32: true, table: sysnums["amd64"]},
	"arm64": {GOARCH: "arm64", Audit: 0xc00000b7, OCI: specs.ArchAARCH64, table: sysnums["arm64"]},
}

// LookupArch returns the compiler's description of goarch (a GOARCH
// value), or an error for an architecture it does not support.
func LookupArch(goarch string) (*Arch, error) {
	a, ok := archs[goarch]
	if !ok {
		return nil, fmt.Errorf("seccompbpf: architecture %q not supported", goarch)
	}
	return a, nil
}

// Syscall returns name's number on a, and whether a has it.
func (a *Arch) Syscall(name string) (uint32, bool) {
	nr, ok := a.table[name]
	return nr, ok
}

// Names returns a's syscall names.
func (a *Arch) Names() []string {
	names := make([]string, 0, len(a.table))
	for n := range a.table {
		names = append(names, n)
	}
	return names
}

// Known reports whether name is a syscall of any supported architecture.
func Known(name string) bool {
	for _, a := range archs {
		if _, ok := a.table[name]; ok {
			return true
		}
	}
	return false
}
