// Package local runs sandboxes as isolated process trees on this host,
// without a container runtime.
//
// Every Exec re-executes the current binary as a small init helper
// (MaybeHelper must be the first call in main and in TestMain). The helper
// starts in fresh pid, mount, network, ipc and uts namespaces and blocks
// until the parent has put it into the sandbox's cgroups and sent it its
// configuration through an inherited pipe. It then builds a read-only root
// (a tmpfs with read-only binds of the host's /usr, /bin, /lib*, /sbin, /etc,
// or the configured Rootfs bound read-only), a fresh /proc with the
// isolation's masked and read-only paths, a minimal /dev, a size-capped /tmp
// and /dev/shm and the workspace at /workspace; pivots into it; drops the
// capability bounding set; applies Landlock (best effort) and the
// isolation's seccomp profile (SandboxSpec.Isolation.Seccomp, compiled to
// BPF by policy/seccompbpf at Create: the profile the containers get, no
// policy of the runner's own; seccomp_linux.go); sets rlimits; and
// forks the user command as uid/gid 65534 with no supplementary groups,
// no capabilities and no_new_privs. The helper stays pid 1 of the namespace
// as a reaper: it collects zombies, reports the command's exit status to the
// parent through a second pipe, and exits when the command exits, which
// makes the kernel SIGKILL whatever else is left in the namespace (daemons,
// processes ignoring SIGTERM).
//
// NetworkEgress: the helper brings lo up in the Exec's fresh network
// namespace, listens on runner.EgressProxyAddr there and passes the
// listening socket to the runner (SCM_RIGHTS) before the command starts; the
// runner hands the connections of all Execs of a sandbox to
// SandboxSpec.Egress (egress_linux.go). The isolation's seccomp profile
// allows inet sockets there; the namespace still has no route out.
//
// No user namespace is used: the runner must run as root, and the user
// command runs as an unprivileged uid in the initial user namespace.
//
// Results: a command killed by a signal has Signal set ("SIGKILL") and
// ExitCode 128+signal. A timeout sets TimedOut (Signal SIGKILL); the memory
// cgroup's OOM kill counter rising during the Exec sets OOMKilled (with
// concurrent Execs in one sandbox an OOM is reported to each of them).
// Cancelling ctx kills the tree and returns the Result together with ctx's
// error; Close during an Exec returns it with runner.ErrClosed. Usage is the
// cgroup's CPU time consumed during the Exec and its peak memory (reset
// before each Exec on cgroup v1; lifetime peak on v2); it includes the
// helper's few MiB.
//
// Output: Result.Stdout/Stderr keep at most Limits.OutputBytes each: the
// first half and the last half joined by "\n[... N bytes truncated ...]\n".
// Process.Stdout/Stderr receive the whole stream from a separate goroutine;
// beyond 8 MiB queued for a slow writer, chunks are dropped for it.
//
// Reaping: Create writes StateDir/<id>/owner.json (runner pid and start
// time, cgroup, workspace owner) before creating anything. Reap destroys
// the sandboxes whose owner is dead. Helpers also die with the runner
// (parent-death signal).
//
// Cgroups: v1 (memory, pids, cpu, cpuacct, freezer) and v2 (memory, pids,
// cpu) are detected at New; only v1 has been exercised on a real host so
// far.
//
// Timeouts, ctx cancellation and Close SIGKILL the helper (the namespace's
// init), which takes the whole tree down; Close additionally kills whatever
// is left in the sandbox's cgroups (freeze, kill, thaw on v1; cgroup.kill on
// v2) before removing them.
package local
