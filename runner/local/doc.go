// Package local runs sandboxes as isolated process trees on this host,
// without a container runtime, with the sandbox agent (cmd/sandbox-agent)
// as each sandbox's init, exactly as the container runners run it.
//
// Create records the sandbox's owner (StateDir/<id>/owner.json, for
// Reap), makes its cgroup (github.com/containerd/cgroups/v3: v1 memory,
// pids, cpu, cpuacct, or v2 memory, pids, cpu) and starts the launcher
// (Config.LauncherPath, cmd/sandbox-launch: a small static binary, package
// launch) in fresh pid, mount, network, ipc and uts namespaces, as the
// leader of a new session, with a parent-death signal. The launcher waits
// until the runner has put it into the cgroup and sent its configuration,
// then brings lo up, builds a read-only root (a tmpfs with read-only binds
// of the host's /usr, /bin, /lib*, /sbin, /etc, or the image's Rootfs
// bound read-only), /proc with the isolation's masked and read-only paths,
// a minimal /dev, a size-capped /tmp and /dev/shm, the workspace at
// /workspace, and a read-only /run holding the agent binary (read-only)
// and the sandbox's run dir (StateDir/<id>/run, root's, mode 0700) at
// /run/sandboxd; it pivots into it and applies the rlimits, Landlock (best
// effort), the capability bounding set reduced to the agent's six
// (policy.AgentCapabilities), no_new_privs and the isolation's seccomp
// profile (SandboxSpec.Isolation.Seccomp, compiled to BPF by
// policy/seccompbpf at Create), and execs the agent as pid 1: uid 0 with
// only those capabilities, serving on /run/sandboxd/agent.sock, starting
// the code as uid/gid 65534 with none (hostside.AgentCommand). Create
// returns once the agent said "ready" and answered a ping over the
// socket, dialled from the host through the run dir.
//
// Everything inside then goes through the agent, as on the container
// runners: Exec (runner/internal/hostside's ExecRequest and ExecResult),
// the persistent Python REPL and file operations (Sandbox.Agent:
// runner.AgentSandbox), pid-1 reaping. With NetworkEgress the agent
// listens on runner.EgressProxyAddr in the sandbox's network namespace (no
// other interface, no route) and forwards every connection to the egress
// socket in the run dir, which the runner serves with SandboxSpec.Egress.
//
// No user namespace is used: the runner must run as root.
//
// Cgroups v1 and v2 are found in the mount table (moby/sys/mountinfo).
// This host binds its controllers to v1; the v2 path runs on a real v2
// kernel in TestCgroupV2UML (user-mode Linux).
//
// Results: exit codes, signals and timeouts as the agent reports them; a
// rise of the memory cgroup's OOM kill counter during a SIGKILLed Exec
// sets OOMKilled (with concurrent Execs in one sandbox an OOM is reported
// to each of them). Usage is the cgroup's CPU time during the Exec and its
// peak memory (the sandbox's lifetime peak); it includes the agent's few
// MiB. Once no Exec runs, processes that left the agent's session (setsid
// daemons) are killed (hostside.Cgroup.KillStrays).
//
// Close closes the agent connection and SIGKILLs the agent, the pid
// namespace's init, which takes the whole tree down; it then kills
// whatever is left in the cgroup, removes it and the state dir, and gives
// a chowned workspace back. The sandbox's mounts live only in its own
// mount namespace, which ends with it. Agents also die with the runner
// (parent-death signal); Reap removes what a dead runner left.
package local
