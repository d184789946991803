// Package kubernetes is the runner backend that gives each sandbox its own
// Pod with the sandbox agent as pid 1 (see buildPod for the isolation).
// sandboxd reaches the agent over the pod network: TCP to the pod's IP,
// authenticated by a per-sandbox token that only sandboxd and the pod
// know (a Secret mounted 0400, readable by the agent's uid only; the agent
// serves no connection that does not send it first). One NetworkPolicy of
// the namespace denies every sandbox pod all egress and all ingress but
// sandboxd's to the agent port.
//
// The http effect is carried over connections sandboxd opens to the pod
// (egress.go): the pod never gets a route out. The workspace is an
// emptyDir of the pod; a host workspace is copied into it at Create and,
// read-write, back after every Exec (workspace.go). A read-only one is
// copied in by an init container's agent and mounted read-only in the
// sandbox container (buildPod, Pod.FillWorkspace).
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

var (
	_ runner.Runner        = (*Runner)(nil)
	_ runner.Reaper        = (*Runner)(nil)
	_ runner.ReplicaReaper = (*Runner)(nil)
	_ runner.Dependent     = (*Runner)(nil)
	_ runner.ImageNamer    = (*Runner)(nil)
)

// Runner creates sandbox pods. Safe for concurrent use.
type Runner struct {
	cfg  Config
	c    kubernetes.Interface
	host string // the apiserver's URL, for Dependencies
	in   *hostside.Instance
	hostside.ImageNames
	// noDial makes Create return once the pod runs, without dialing the
	// agent: the kwok benchmark's (BenchmarkKwok), whose pods run no
	// agent. Set by tests only; no Config key reaches it.
	noDial bool
}

// New connects to the cluster, applies the namespace's NetworkPolicy,
// reaps orphans and starts the reconcile loop. An apiserver that does not
// answer is runner.ErrDaemonDown.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, c: cfg.Client, ImageNames: hostside.ImageNames{Default: cfg.Image}}
	if r.c == nil {
		var rc *rest.Config
		var err error
		if cfg.Kubeconfig == "" {
			rc, err = rest.InClusterConfig()
		} else {
			rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		}
		if err != nil {
			return nil, fmt.Errorf("kubernetes: credentials: %w", err)
		}
		rc.QPS, rc.Burst = 200, 400
		r.host = rc.Host
		if r.c, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("kubernetes: client: %w", err)
		}
	}
	if cfg.SeccompFallback {
		cfg.Logger.Warn("kubernetes runner: seccomp fallback: sandbox pods run with the runtime's default profile, not the policy's (SeccompFallback)")
	}
	if cfg.WorkspaceDriver == "" {
		cfg.Logger.Warn("kubernetes runner: no workspace driver: workspaces are emptyDirs whose disk_bytes only the kubelet's eviction enforces (after the fact) and whose disk_inodes nothing does; set runner.kubernetes.workspace_driver (deploy/kubernetes/workspace-csi/)")
	}
	var err error
	if r.in, err = hostside.NewInstance("kubernetes", cfg.StateDir, cfg.InstanceID, "", cfg.Logger); err != nil {
		return nil, err
	}
	if err := r.applyPolicy(ctx); err != nil {
		r.in.Close(ctx, func() error { return nil })
		return nil, err
	}
	if _, err := r.Reap(ctx); err != nil {
		cfg.Logger.Warn("kubernetes runner: initial reconcile failed (the reconcile loop retries)", "err", err)
	}
	r.in.StartReconcile(ctx, cfg.ReconcileInterval, r.Reap)
	return r, nil
}

// applyPolicy creates or updates the namespace's NetworkPolicy.
func (r *Runner) applyPolicy(ctx context.Context) error {
	np, err := buildPolicy(r.cfg.Namespace, r.cfg.AgentPort, r.cfg.SandboxdCIDR, r.cfg.SandboxdLabel)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, hostside.APITimeout)
	defer cancel()
	api := r.c.NetworkingV1().NetworkPolicies(r.cfg.Namespace)
	_, err = api.Create(cctx, np, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur = np
		old, gerr := api.Get(cctx, np.Name, metav1.GetOptions{})
		if gerr != nil {
			return r.wrap("get network policy", gerr)
		}
		cur.ResourceVersion = old.ResourceVersion
		_, err = api.Update(cctx, cur, metav1.UpdateOptions{})
	}
	return r.wrap("apply network policy", err)
}

// Name implements runner.Runner.
func (r *Runner) Name() string { return "kubernetes" }

// Capabilities implements runner.Runner.
func (r *Runner) Capabilities() runner.Capabilities {
	return runner.Capabilities{PIDNamespace: true, NetNamespace: true, MountNamespace: true, Cgroups: true, Seccomp: true, Network: true}
}

// Dependencies implements runner.Dependent: the apiserver.
func (r *Runner) Dependencies() []string {
	if r.host == "" {
		return nil
	}
	return []string{r.host}
}

// Close stops the reconcile loop. Open sandboxes are not closed.
func (r *Runner) Close(ctx context.Context) error {
	return r.in.Close(ctx, func() error { return nil })
}

// wrap classifies an API error: an apiserver that cannot be reached or
// does not answer in time is runner.ErrDaemonDown.
func (r *Runner) wrap(op string, err error) error {
	return hostside.Wrap("kubernetes", r.host, op, err, unavailable)
}

func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) || strings.Contains(err.Error(), "connection refused")
}

// seccomp is the pod's profile for iso (the agent's: agentProfile, or
// RuntimeDefault with SeccompFallback) and the raw filter of the code's
// processes (the policy's profile, with the fallback too).
func (r *Runner) seccomp(iso *runner.Isolation) (corev1.SeccompProfile, []byte, error) {
	sc := iso.Seccomp
	if r.cfg.RuntimeClass != "" && strings.Contains(r.cfg.RuntimeClass, "gvisor") {
		sc = iso.SeccompGVisor
	}
	filter, err := codeFilter(sc)
	if err != nil {
		return corev1.SeccompProfile{}, nil, err
	}
	if r.cfg.SeccompFallback {
		return corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}, filter, nil
	}
	name, _, err := ProfileName(r.cfg.SeccompDir, agentProfile(sc))
	if err != nil {
		return corev1.SeccompProfile{}, nil, err
	}
	return corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}, filter, nil
}
