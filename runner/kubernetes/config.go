package kubernetes

import (
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// Defaults of Config.
const (
	DefaultNamespace = "sandboxd"
	DefaultImage     = "sandboxd/python:latest"
	// DefaultAgentPort is the TCP port the agent listens on in each pod.
	DefaultAgentPort = 7777
	// DefaultSeccompDir is the directory, relative to the kubelet's
	// seccomp root (/var/lib/kubelet/seccomp), where the profiles that
	// SeccompProfiles returns are installed.
	DefaultSeccompDir = "sandboxd"
	// PolicyName is the NetworkPolicy of the namespace that selects
	// every sandbox pod.
	PolicyName = "sandboxd-sandboxes"
)

// Config configures a Kubernetes Runner.
type Config struct {
	// Kubeconfig is the path of a kubeconfig file; "" means in-cluster
	// credentials (the pod's service account).
	Kubeconfig string
	// Client, when set, is used instead of Kubeconfig (tests: the fake
	// clientset).
	Client kubernetes.Interface
	// Namespace holds every sandbox pod, secret and the NetworkPolicy.
	// Default DefaultNamespace.
	Namespace string
	// Image is the default sandbox image; it must contain the agent at
	// AgentBinary (hostside.AgentBinary). Default DefaultImage.
	Image string
	// AgentBinary is the agent's path inside the image. Default
	// hostside.AgentBinary.
	AgentBinary string
	// AgentPort is the agent's TCP port. Default DefaultAgentPort.
	AgentPort int
	// RuntimeClass names the pods' RuntimeClass ("gvisor" for runsc);
	// "" the node's default (runc).
	RuntimeClass string
	// SeccompDir is where, under the kubelet's seccomp root, the
	// Localhost profiles live (SeccompProfiles writes them). Default
	// DefaultSeccompDir.
	SeccompDir string
	// SeccompFallback, when true, runs pods with the RuntimeDefault
	// profile instead of the policy's Localhost one (weaker: a warning is
	// logged at start). For clusters whose nodes cannot take the
	// profiles.
	SeccompFallback bool
	// SandboxdCIDR is where sandboxd dials the agents from when it runs
	// outside the cluster (the node's address, "10.0.0.5/32"); the
	// NetworkPolicy admits ingress to the agent port only from it. Empty:
	// from pods of this namespace labelled SandboxdLabel.
	SandboxdCIDR string
	// SandboxdLabel selects sandboxd's own pods when it runs in the
	// cluster. Default "app.kubernetes.io/name=sandboxd".
	SandboxdLabel string
	// StateDir holds this runner's owner record (hostside.StateRoot).
	// Default $TMPDIR/sandboxd-kubernetes.
	StateDir string
	// InstanceID labels what this runner creates. Default random.
	InstanceID string
	// OwnerPod is the pod this sandboxd runs in, when it runs in the
	// cluster (cmd/sandboxd: runner.kubernetes.pod_name, pod_namespace
	// and pod_uid, from the downward API): every pod and secret the
	// runner creates records it (LabelOwnerPod), and another instance
	// judges them by that pod rather than by a process id it cannot see
	// from its own pid namespace (Reap). Zero: outside the cluster, the
	// owner is its process alone. Namespace, name and uid are all set or
	// none; a namespace other than Namespace needs get on its pods.
	OwnerPod OwnerPod
	// Defaults fill zero limits of a SandboxSpec.
	Defaults runner.Limits
	// CPURequestPercent is the share of a sandbox's CPU limit its pod
	// requests from the scheduler, 1 to 100. 100 (the default, also for
	// 0) requests the whole limit: Guaranteed QoS, a node holds only as
	// many sandboxes as it has cores for their limits. Lower packs more
	// sandboxes on a node (Burstable QoS) while each is still capped at
	// its limit; memory is always requested whole (it cannot be taken
	// back from a sandbox without killing it).
	CPURequestPercent int
	// WorkspaceDriver names the CSI driver of the workspace volumes
	// (k8s-workspace, runner/kubernetes/internal/wscsi: each workspace
	// its own filesystem of the job's disk_bytes and disk_inodes, ENOSPC
	// inside the pod when full). "": an emptyDir with a sizeLimit, which
	// only the kubelet's eviction enforces, after the fact, and with no
	// inode limit (a warning at start).
	WorkspaceDriver string
	// TmpBytes caps /tmp and /dev/shm (memory-backed emptyDirs). Default
	// 64 MiB.
	TmpBytes int64
	// ReconcileInterval is how often orphaned pods and secrets are
	// removed. Default 30s; negative disables the loop.
	ReconcileInterval time.Duration
	// Logger defaults to discarding.
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		return fmt.Errorf("kubernetes: namespace %q: %v", c.Namespace, errs)
	}
	if !c.OwnerPod.IsZero() {
		if err := c.OwnerPod.check(); err != nil {
			return err
		}
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.AgentBinary == "" {
		c.AgentBinary = hostside.AgentBinary
	}
	if c.AgentPort == 0 {
		c.AgentPort = DefaultAgentPort
	}
	if c.AgentPort < 1 || c.AgentPort > 65535 {
		return fmt.Errorf("kubernetes: agent port %d", c.AgentPort)
	}
	if c.SeccompDir == "" {
		c.SeccompDir = DefaultSeccompDir
	}
	if c.CPURequestPercent == 0 {
		c.CPURequestPercent = 100
	}
	if c.CPURequestPercent < 1 || c.CPURequestPercent > 100 {
		return fmt.Errorf("kubernetes: cpu request percent %d: want 1 to 100", c.CPURequestPercent)
	}
	if c.SandboxdLabel == "" {
		c.SandboxdLabel = "app.kubernetes.io/name=sandboxd"
	}
	// The agent is in the image: CompleteConfig's agent check gets a
	// placeholder that exists.
	agent := "/proc/self/exe"
	return hostside.CompleteConfig("kubernetes", hostside.ConfigFields{
		AgentPath: &agent, StateDir: &c.StateDir, InstanceID: &c.InstanceID, Defaults: &c.Defaults,
		TmpBytes: &c.TmpBytes, ReconcileInterval: &c.ReconcileInterval, Logger: &c.Logger,
	})
}
