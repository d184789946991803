package policy

import (
	"bytes"
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/policy/seccompbpf"
	"github.com/sandboxd/sandboxd/policy/seccompbpf/bpftest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/file (rewritten with -update).
func golden(t *testing.T, file string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", file)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./policy -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s drifted from the profile; review and run go test ./policy -update", path)
	}
}

// TestSeccompGolden pins every output of the one profile for amd64: the
// OCI form (runc through containerd and Docker, a future Kubernetes
// Localhost profile), the gVisor variant, and the BPF program the local
// runner loads.
func TestSeccompGolden(t *testing.T) {
	t.Parallel()
	arch, err := seccompbpf.LookupArch("amd64")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		inet bool
	}{{"none", false}, {"egress", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := seccompProfile(tc.inet, "amd64")
			for file, v := range map[string]*specs.LinuxSeccomp{"seccomp-oci-" + tc.name + ".json": p, "seccomp-gvisor-" + tc.name + ".json": seccompGVisor(p)} {
				b, err := json.MarshalIndent(v, "", "\t")
				if err != nil {
					t.Fatal(err)
				}
				golden(t, file, append(b, '\n'))
			}
			prog, err := seccompbpf.Compile(p, arch)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "seccomp-bpf-"+tc.name+".txt", []byte(bpftest.Disasm(prog)))
		})
	}
}

// TestSeccompPortable holds the profile to the shapes that mean the same
// under runc (libseccomp), gVisor and policy/seccompbpf, and to its
// contract.
func TestSeccompPortable(t *testing.T) {
	t.Parallel()
	for _, goarch := range []string{"amd64", "arm64"} {
		for _, inet := range []bool{false, true} {
			p := seccompProfile(inet, goarch)
			arch, _ := seccompbpf.LookupArch(goarch)
			if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != uint(unix.EPERM) {
				t.Errorf("%s inet=%v: default %s %v, want EPERM", goarch, inet, p.DefaultAction, p.DefaultErrnoRet)
			}
			if !slices.Equal(p.Architectures, []specs.Arch{arch.OCI}) {
				t.Errorf("%s inet=%v: architectures %v, want only the native one", goarch, inet, p.Architectures)
			}
			actions := map[string]specs.LinuxSeccompAction{}
			unconditional := map[string]bool{}
			for _, sc := range p.Syscalls {
				for _, n := range sc.Names {
					if _, ok := arch.Syscall(n); !ok {
						t.Errorf("%s: %s is no syscall of the architecture", goarch, n)
					}
					if a, ok := actions[n]; ok && a != sc.Action {
						t.Errorf("%s: %s has rules with actions %s and %s", goarch, n, a, sc.Action)
					}
					if unconditional[n] || len(sc.Args) == 0 && actions[n] != "" {
						t.Errorf("%s: %s has an unconditional rule and another", goarch, n)
					}
					actions[n] = sc.Action
					unconditional[n] = len(sc.Args) == 0
					if sc.Action == specs.ActAllow && slices.Contains(seccompDenied, n) {
						t.Errorf("%s: denied %s allowed", goarch, n)
					}
				}
				if len(sc.Args) > 1 {
					t.Errorf("%s: rule %v has %d conditions; runc and gVisor OR conditions on one argument, keep one", goarch, sc.Names, len(sc.Args))
				}
				for _, c := range sc.Args {
					// Every comparison reads the low 32 bits only.
					if c.Op != specs.OpMaskedEqual || c.Value&^low32 != 0 || c.ValueTwo&^c.Value != 0 {
						t.Errorf("%s: rule %v condition %+v is not a masked comparison of the low 32 bits", goarch, sc.Names, c)
					}
				}
			}
			if actions["clone3"] != specs.ActErrno {
				t.Errorf("%s: clone3 %s, want errno (ENOSYS)", goarch, actions["clone3"])
			}
		}
	}
	for _, n := range append(slices.Clone(seccompAllowed), seccompDenied...) {
		if !seccompbpf.Known(n) {
			t.Errorf("%s: no syscall of a supported architecture (a typo?)", n)
		}
	}
}

// TestSeccompTighterThanDocker: everything the profile allows, Docker's
// default profile allows a process without capabilities too.
func TestSeccompTighterThanDocker(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(seccomp.DefaultProfile())
	if err != nil {
		t.Fatal(err)
	}
	rs := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	docker, err := seccomp.LoadProfile(string(b), rs)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{}
	for _, sc := range docker.Syscalls {
		if sc.Action == specs.ActAllow {
			for _, n := range sc.Names {
				allowed[n] = true
			}
		}
	}
	for _, sc := range nativeProfile(true).Syscalls {
		if sc.Action != specs.ActAllow {
			continue
		}
		for _, n := range sc.Names {
			if !allowed[n] {
				t.Errorf("%s allowed; Docker's default profile refuses it", n)
			}
		}
	}
}

// The gVisor variant differs in exactly one rule: clone3 is allowed.
func TestSeccompGVisor(t *testing.T) {
	t.Parallel()
	for _, inet := range []bool{false, true} {
		p := nativeProfile(inet)
		g := seccompGVisor(p)
		if len(p.Syscalls) != len(g.Syscalls) || p.DefaultAction != g.DefaultAction {
			t.Fatalf("inet=%v: the gVisor profile differs in shape", inet)
		}
		changed := 0
		for i := range p.Syscalls {
			a, b := p.Syscalls[i], g.Syscalls[i]
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if bytes.Equal(ja, jb) {
				continue
			}
			changed++
			if !slices.Equal(b.Names, []string{"clone3"}) || b.Action != specs.ActAllow || b.ErrnoRet != nil || a.Action != specs.ActErrno {
				t.Errorf("inet=%v: rule %v changed from %s to %s", inet, b.Names, a.Action, b.Action)
			}
		}
		if changed != 1 {
			t.Errorf("inet=%v: %d rules changed, want the clone3 one", inet, changed)
		}
		if p.Syscalls[len(p.Syscalls)-1].Action != g.Syscalls[len(g.Syscalls)-1].Action {
			t.Error("the gVisor variant shares rules with the profile")
		}
	}
}

// ioctlAllBut covers every 32-bit command except the refused ones.
func TestIoctlAllBut(t *testing.T) {
	t.Parallel()
	refused := []uint32{tiocsti, tioclinux}
	cover := ioctlAllBut(refused...)
	in := func(x uint32) bool {
		for _, c := range cover {
			if uint64(x)&c.mask == c.value {
				return true
			}
		}
		return false
	}
	r := rand.New(rand.NewPCG(3, 4))
	xs := []uint32{0, 0xffffffff, tiocsti ^ 1, tioclinux ^ 1<<31, tiocsti + 1, tiocsti - 1}
	for range 100000 {
		xs = append(xs, r.Uint32())
	}
	for i := range 32 {
		xs = append(xs, tiocsti^1<<i, tioclinux^1<<i)
	}
	for _, x := range xs {
		if in(x) == slices.Contains(refused, x) {
			t.Fatalf("command %#x: allowed %v", x, in(x))
		}
	}
	for _, x := range refused {
		if in(x) {
			t.Fatalf("refused command %#x allowed", x)
		}
	}
}

// TestSeccompAnswers runs the compiled profile (the local runner's program)
// in the BPF VM: the decisions the isolation table promises, and for every
// conditioned int argument the same answer whatever its high 32 bits.
func TestSeccompAnswers(t *testing.T) {
	t.Parallel()
	arch, _ := seccompbpf.LookupArch("amd64")
	const (
		allow  = seccompbpf.RetAllow
		eperm  = seccompbpf.RetErrno | uint32(unix.EPERM)
		enosys = seccompbpf.RetErrno | uint32(unix.ENOSYS)
		kill   = seccompbpf.RetKillProcess
	)
	// amd64 syscall numbers.
	const (
		read, ioctl, socket, clone, personality, mount, unshare, ptrace, clone3 = 0, 16, 41, 56, 135, 165, 272, 101, 435
	)
	type call struct {
		name string
		nr   uint32
		arg  [6]uint64
		arch uint32
		none uint32 // the answer without the http effect
		http uint32 // with it
	}
	calls := []call{
		{"read", read, [6]uint64{}, 0, allow, allow},
		{"socket AF_UNIX", socket, [6]uint64{unix.AF_UNIX}, 0, allow, allow},
		{"socket AF_INET", socket, [6]uint64{unix.AF_INET}, 0, eperm, allow},
		{"socket AF_INET6", socket, [6]uint64{unix.AF_INET6}, 0, eperm, allow},
		{"socket AF_NETLINK", socket, [6]uint64{unix.AF_NETLINK}, 0, eperm, allow},
		{"socket AF_VSOCK", socket, [6]uint64{unix.AF_VSOCK}, 0, eperm, eperm},
		{"socket AF_ALG", socket, [6]uint64{unix.AF_ALG}, 0, eperm, eperm},
		{"socket AF_PACKET", socket, [6]uint64{unix.AF_PACKET}, 0, eperm, eperm},
		{"ioctl TIOCSTI", ioctl, [6]uint64{0, tiocsti}, 0, eperm, eperm},
		{"ioctl TIOCLINUX", ioctl, [6]uint64{0, tioclinux}, 0, eperm, eperm},
		{"ioctl TCGETS", ioctl, [6]uint64{0, unix.TCGETS}, 0, allow, allow},
		{"personality query", personality, [6]uint64{0xffffffff}, 0, allow, allow},
		{"personality PER_LINUX", personality, [6]uint64{0}, 0, allow, allow},
		{"personality ADDR_NO_RANDOMIZE", personality, [6]uint64{0x0040000}, 0, eperm, eperm},
		{"clone fork", clone, [6]uint64{uint64(unix.SIGCHLD)}, 0, allow, allow},
		{"clone thread", clone, [6]uint64{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD}, 0, allow, allow},
		{"clone CLONE_NEWUSER", clone, [6]uint64{unix.CLONE_NEWUSER}, 0, eperm, eperm},
		{"clone CLONE_NEWNET", clone, [6]uint64{unix.CLONE_NEWNET}, 0, eperm, eperm},
		{"clone3", clone3, [6]uint64{}, 0, enosys, enosys},
		{"mount", mount, [6]uint64{}, 0, eperm, eperm},
		{"unshare", unshare, [6]uint64{unix.CLONE_NEWUSER}, 0, eperm, eperm},
		{"ptrace", ptrace, [6]uint64{}, 0, eperm, eperm},
		{"x32 read", 0x40000000 | read, [6]uint64{}, 0, kill, kill},
		{"i386 getpid", 20, [6]uint64{}, 0x40000003, kill, kill},
	}
	// Where the kernel reads an int, the high half of the register.
	intArg := map[uint32]int{socket: 0, ioctl: 1, personality: 0, clone: 0}
	r := rand.New(rand.NewPCG(5, 6))
	for _, inet := range []bool{false, true} {
		p := seccompProfile(inet, "amd64")
		prog, err := seccompbpf.Compile(p, arch)
		if err != nil {
			t.Fatal(err)
		}
		vm, err := bpftest.NewVM(prog)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range calls {
			d := bpftest.Data{Nr: c.nr, Arch: arch.Audit, Args: c.arg}
			if c.arch != 0 {
				d.Arch = c.arch
			}
			want := c.none
			if inet {
				want = c.http
			}
			forms := []bpftest.Data{d}
			if i, ok := intArg[c.nr]; ok {
				for _, hi := range []uint64{1, 0xdead, 0xffffffff, r.Uint64() >> 32} {
					h := d
					h.Args[i] |= hi << 32
					forms = append(forms, h)
				}
			}
			for _, f := range forms {
				got, err := vm.Run(f)
				if err != nil {
					t.Fatal(err)
				}
				ref, _ := bpftest.Eval(p, arch, f)
				if got != want || ref != want {
					t.Errorf("http=%v %s %#x: program %#x, profile %#x, want %#x", inet, c.name, f.Args, got, ref, want)
				}
			}
		}
		// And over every syscall number with random arguments: the
		// program agrees with the profile, high halves included.
		for nr := uint32(0); nr < 600; nr++ {
			d := bpftest.Data{Nr: nr, Arch: arch.Audit}
			for i := range d.Args {
				d.Args[i] = uint64(r.Uint32() % 64)
			}
			low, _ := vm.Run(d)
			if ref, _ := bpftest.Eval(p, arch, d); low != ref {
				t.Errorf("http=%v syscall %d %v: program %#x, profile %#x", inet, nr, d.Args, low, ref)
			}
			if i, ok := intArg[nr]; ok {
				h := d
				h.Args[i] |= r.Uint64() << 32
				if high, _ := vm.Run(h); high != low {
					t.Errorf("http=%v syscall %d: %#x answered %#x, %#x answered %#x", inet, nr, d.Args[i], low, h.Args[i], high)
				}
			}
		}
	}
}
