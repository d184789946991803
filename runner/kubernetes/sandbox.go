package kubernetes

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

var (
	_ runner.Sandbox      = (*Sandbox)(nil)
	_ runner.AgentSandbox = (*Sandbox)(nil)
	_ runner.Prestarter   = (*Sandbox)(nil)
)

// Pod is a started sandbox pod up to the agent dial: what a control-plane
// benchmark (kwok, where pods run no agent) drives through StartPod and
// Pod.Delete.
type Pod struct {
	Name  string
	IP    string
	Token []byte
	// Created, Running: when the Pod was created and seen running.
	Created, Running time.Time
	r                *Runner
	pod              *corev1.Pod // as last seen
	// fill: a read-only workspace's pod whose init container (the
	// agent that fills the workspace) runs: FillWorkspace is next.
	fill bool
}

// StartPod creates sandbox spec's Secret and Pod and waits until the pod
// runs with an IP (with a read-only workspace: until its init container,
// the agent that fills the workspace, runs; FillWorkspace then starts the
// sandbox container); spec must have passed hostside.Reserve (Create
// does it). On failure nothing is left behind.
func (r *Runner) StartPod(ctx context.Context, spec runner.SandboxSpec, limits runner.Limits) (_ *Pod, err error) {
	p := &Pod{Name: podName(spec.ID), Token: make([]byte, agent.TokenBytes), r: r, fill: spec.Isolation != nil && spec.Isolation.Workspace == runner.WorkspaceReadOnly}
	rand.Read(p.Token)
	lbl := r.in.Labels(spec)
	ann := map[string]string{}
	if v, ok := lbl[hostside.LabelOwnerProc]; ok {
		// "pid:starttime" is no label value.
		delete(lbl, hostside.LabelOwnerProc)
		ann[hostside.LabelOwnerProc] = v
	}
	if !r.cfg.OwnerPod.IsZero() {
		ann[LabelOwnerPod] = r.cfg.OwnerPod.String()
	}
	sc, filter, err := r.seccomp(spec.Isolation)
	if err != nil {
		return nil, err
	}
	img := spec.Image
	if img == "" {
		img = r.cfg.Image
	}
	pod := buildPod(podInput{
		Name: p.Name, Namespace: r.cfg.Namespace, Spec: spec, Limits: limits, Labels: lbl, Annotations: ann,
		Image: img, AgentBinary: r.cfg.AgentBinary, AgentPort: r.cfg.AgentPort, RuntimeClass: r.cfg.RuntimeClass,
		Seccomp: sc, TmpBytes: r.cfg.TmpBytes, CPURequestPercent: r.cfg.CPURequestPercent,
		WorkspaceDriver: r.cfg.WorkspaceDriver,
	})
	cctx, cancel := context.WithTimeout(ctx, hostside.CreateTimeout)
	defer cancel()
	defer func() {
		if err != nil {
			if derr := p.Delete(context.WithoutCancel(ctx)); derr != nil {
				r.cfg.Logger.Warn("kubernetes runner: cleanup after failed create", "pod", p.Name, "err", derr)
			}
		}
	}()
	secretLabels := map[string]string{}
	for k, v := range lbl {
		secretLabels[k] = v
	}
	sec := buildSecret(p.Name, r.cfg.Namespace, secretLabels, p.Token, filter)
	sec.Annotations = ann
	if _, err := r.c.CoreV1().Secrets(r.cfg.Namespace).Create(cctx, sec, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create sandbox: id %q already in use: %w: %w", spec.ID, runner.ErrInvalidSpec, err)
		}
		return nil, hostside.CtxOr(ctx, r.wrap("create secret", err))
	}
	p.Created = time.Now()
	created, err := r.c.CoreV1().Pods(r.cfg.Namespace).Create(cctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, hostside.CtxOr(ctx, r.wrap("create pod", err))
	}
	running, err := r.waitRunning(cctx, created, p.fill)
	if err != nil {
		return nil, hostside.CtxOr(ctx, err)
	}
	p.IP, p.Running, p.pod = running.Status.PodIP, time.Now(), running
	return p, nil
}

// FillWorkspace copies the host workspace dir into a read-only
// workspace pod's emptyDir through its init container's agent, shuts
// that agent down (the init container succeeds) and waits until the
// sandbox container, which mounts the emptyDir read-only, runs.
func (p *Pod) FillWorkspace(ctx context.Context, dir string) error {
	if !p.fill {
		return errors.New("kubernetes runner: FillWorkspace on a pod without a read-only workspace")
	}
	actx, cancel := context.WithTimeout(ctx, hostside.AgentTimeout)
	defer cancel()
	cl, err := agent.DialToken(actx, net.JoinHostPort(p.IP, strconv.Itoa(p.r.cfg.AgentPort)), p.Token)
	if err == nil {
		if err = cl.Ping(actx); err != nil {
			cl.Close()
		}
	}
	if err != nil {
		return hostside.CtxOr(ctx, fmt.Errorf("workspace fill agent did not answer: %w: %w", runner.ErrUnavailable, err))
	}
	err = newMirror(dir).push(ctx, cl)
	if err == nil {
		err = cl.Shutdown(actx)
	}
	cl.Close()
	if err != nil {
		return hostside.CtxOr(ctx, fmt.Errorf("fill workspace: %w", err))
	}
	cctx, cancel := context.WithTimeout(ctx, hostside.CreateTimeout)
	defer cancel()
	running, err := p.r.waitRunning(cctx, p.pod, false)
	if err != nil {
		return hostside.CtxOr(ctx, err)
	}
	p.IP, p.Running, p.pod, p.fill = running.Status.PodIP, time.Now(), running, false
	return nil
}

// waitRunning watches pod until it runs with an IP (fill: until its
// init container fillContainer runs and the pod has an IP), failing as
// soon as it ended or a container cannot start.
func (r *Runner) waitRunning(ctx context.Context, pod *corev1.Pod, fill bool) (*corev1.Pod, error) {
	if done, err := podReady(pod, fill); done || err != nil {
		return pod, err
	}
	w, err := r.c.CoreV1().Pods(pod.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(), ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		return nil, r.wrap("watch pod", err)
	}
	defer w.Stop()
	// The fake clientset and some events may be missed: look again now
	// and then, less often the longer the pod takes: every starting pod's
	// GETs count against the client's QPS, and a second each would take
	// all of it with a few hundred pods waiting (BenchmarkKwok's burst).
	poll := time.Second
	tick := time.NewTimer(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pod %s not running: %w", pod.Name, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return r.pollRunning(ctx, pod.Name, fill)
			}
			if ev.Type == watch.Deleted {
				return nil, fmt.Errorf("pod %s deleted while starting: %w", pod.Name, runner.ErrUnavailable)
			}
			if p, ok := ev.Object.(*corev1.Pod); ok {
				if done, err := podReady(p, fill); done || err != nil {
					return p, err
				}
			}
		case <-tick.C:
			p, err := r.c.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return nil, r.wrap("get pod", err)
			}
			if done, err := podReady(p, fill); done || err != nil {
				return p, err
			}
			poll = min(2*poll, 8*time.Second)
			tick.Reset(poll)
		}
	}
}

func (r *Runner) pollRunning(ctx context.Context, name string, fill bool) (*corev1.Pod, error) {
	for {
		p, err := r.c.CoreV1().Pods(r.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, r.wrap("get pod", err)
		}
		if done, err := podReady(p, fill); done || err != nil {
			return p, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pod %s not running: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// podReady reports whether p runs with an IP (fill: whether its init
// container fillContainer runs and it has an IP), or why it never will.
func podReady(p *corev1.Pod, fill bool) (bool, error) {
	switch p.Status.Phase {
	case corev1.PodRunning:
		if fill {
			// The fill agent exited before sandboxd filled the
			// workspace: not this runner's doing.
			return false, fmt.Errorf("pod %s: the workspace fill container ended unfilled: %w", p.Name, runner.ErrUnavailable)
		}
		return p.Status.PodIP != "", nil
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, fmt.Errorf("pod %s ended (%s: %s): %w", p.Name, p.Status.Phase, p.Status.Message, runner.ErrUnavailable)
	}
	if fill && p.Status.PodIP != "" {
		for _, cs := range p.Status.InitContainerStatuses {
			if cs.Name == fillContainer && cs.State.Running != nil {
				return true, nil
			}
		}
	}
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "CreateContainerError", "InvalidImageName", "RunContainerError":
				return false, fmt.Errorf("pod %s: %s: %s: %w", p.Name, w.Reason, w.Message, runner.ErrUnavailable)
			}
		}
	}
	return false, nil
}

// Delete removes the Pod (no grace period) and its Secret.
func (p *Pod) Delete(ctx context.Context) error {
	return p.r.remove(ctx, p.Name)
}

// remove deletes pod name and its secret.
func (r *Runner) remove(ctx context.Context, name string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostside.RemoveTimeout)
	defer cancel()
	var errs []error
	err := r.c.CoreV1().Pods(r.cfg.Namespace).Delete(cctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, r.wrap("delete pod "+name, err))
	}
	err = r.c.CoreV1().Secrets(r.cfg.Namespace).Delete(cctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, r.wrap("delete secret "+name, err))
	}
	return errors.Join(errs...)
}

// Sandbox is one sandbox pod and the agent connection into it.
type Sandbox struct {
	r      *Runner
	id     string
	spec   runner.SandboxSpec
	limits runner.Limits
	pod    *Pod
	client *agent.Client
	// NetworkEgress: the reverse connections' listener and pump.
	egress     *chanListener
	stopEgress context.CancelFunc
	// ws keeps a read-write workspace and the host's copy in step (nil
	// otherwise).
	ws *mirror

	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

// Create implements runner.Runner: the Secret and Pod, the wait until it
// runs and the agent answers over the authenticated channel, and the
// workspace's content copied in. On any failure nothing is left behind.
func (r *Runner) Create(ctx context.Context, spec runner.SandboxSpec) (_ runner.Sandbox, err error) {
	limits, err := r.in.Reserve(ctx, &spec, r.cfg.Defaults)
	if err != nil {
		return nil, err
	}
	s := &Sandbox{r: r, id: spec.ID, spec: spec, limits: limits}
	defer func() {
		if err != nil {
			r.in.Abort(ctx, spec.ID, s.destroy)
		}
	}()
	if s.pod, err = r.StartPod(ctx, spec, limits); err != nil {
		return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	if r.noDial {
		return s, nil // BenchmarkKwok: no agent to dial
	}
	if spec.Isolation.Workspace == runner.WorkspaceReadOnly {
		// Filled before the code's container starts; never copied back.
		if err := s.pod.FillWorkspace(ctx, spec.Workspace); err != nil {
			return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
	}
	actx, cancel := context.WithTimeout(ctx, hostside.AgentTimeout)
	defer cancel()
	cl, err := agent.DialToken(actx, net.JoinHostPort(s.pod.IP, strconv.Itoa(r.cfg.AgentPort)), s.pod.Token)
	if err == nil {
		if err = cl.Ping(actx); err != nil {
			cl.Close()
		}
	}
	if err != nil {
		return nil, hostside.CtxOr(ctx, fmt.Errorf("create sandbox %s: agent did not answer: %w: %w", spec.ID, runner.ErrUnavailable, err))
	}
	s.client = cl
	if spec.Isolation.Network == runner.NetworkEgress {
		s.egress = newChanListener(&net.TCPAddr{IP: net.ParseIP(s.pod.IP), Port: r.cfg.AgentPort + 1})
		ectx, cancel := context.WithCancel(context.Background())
		s.stopEgress = cancel
		pumpEgress(ectx, reverseAddr(s.pod.IP, r.cfg.AgentPort), s.pod.Token, s.egress)
		go func() {
			if err := spec.Egress.Serve(s.egress); err != nil && !errors.Is(err, net.ErrClosed) {
				r.cfg.Logger.Warn("kubernetes runner: egress serve", "sandbox", s.id, "err", err)
			}
		}()
	}
	if spec.Isolation.Workspace == runner.WorkspaceReadWrite {
		s.ws = newMirror(spec.Workspace)
		if err := s.ws.push(ctx, cl); err != nil {
			return nil, fmt.Errorf("create sandbox %s: copy workspace in: %w", spec.ID, err)
		}
	}
	return s, nil
}

// ID implements runner.Sandbox.
func (s *Sandbox) ID() string { return s.id }

// Agent implements runner.AgentSandbox.
func (s *Sandbox) Agent() *agent.Client { return s.client }

// PodName is the sandbox's Pod.
func (s *Sandbox) PodName() string { return s.pod.Name }

func (s *Sandbox) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Prestart implements runner.Prestarter.
func (s *Sandbox) Prestart(ctx context.Context, p runner.Process) error {
	return hostside.Prestart(ctx, s.id, s.isClosed(), s.client, p, s.limits, s.spec.Isolation.Workspace)
}

// Exec implements runner.Sandbox: the agent runs the process; a
// read-write workspace gets the host's changes before it and gives the
// pod's back after it (PushWorkspace, PullWorkspace).
func (s *Sandbox) Exec(ctx context.Context, p runner.Process) (runner.Result, error) {
	if err := hostside.CanExec(ctx, s.id, s.isClosed()); err != nil {
		return runner.Result{}, err
	}
	req, onOutput, err := hostside.ExecRequest(p, s.limits, s.spec.Isolation.Workspace)
	if err != nil {
		return runner.Result{}, err
	}
	if err := s.PushWorkspace(ctx); err != nil {
		return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w", s.id, err)
	}
	ar, err := s.client.Exec(ctx, req, onOutput)
	if err != nil {
		if err, ok := hostside.ExecError(ctx, s.id, s.isClosed, err); ok {
			return runner.Result{}, err
		}
		return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w: %w", s.id, runner.ErrUnavailable, err)
	}
	res := hostside.ExecResult(ar, req, s.limits, nil)
	if err := s.PullWorkspace(ctx); err != nil {
		return runner.Result{}, fmt.Errorf("exec in sandbox %s: %w", s.id, err)
	}
	return res, nil
}

// PushWorkspace implements runner.WorkspaceSyncer: the host workspace's
// changes since the last sync reach the pod's (a read-only or no
// workspace: nothing).
func (s *Sandbox) PushWorkspace(ctx context.Context) error {
	if s.ws == nil {
		return nil
	}
	if err := s.ws.push(ctx, s.client); err != nil {
		return fmt.Errorf("copy workspace in: %w", err)
	}
	return nil
}

// PullWorkspace implements runner.WorkspaceSyncer: the pod workspace's
// changes since the last sync, deletions included, reach the host's.
func (s *Sandbox) PullWorkspace(ctx context.Context) error {
	if s.ws == nil {
		return nil
	}
	if err := s.ws.pull(ctx, s.client); err != nil {
		return fmt.Errorf("copy workspace out: %w", err)
	}
	return nil
}

// Stats implements runner.Sandbox. The pod's cgroup is the node's; not
// read from here yet.
func (s *Sandbox) Stats(ctx context.Context) (runner.Usage, error) {
	if s.isClosed() {
		return runner.Usage{}, fmt.Errorf("stats of sandbox %s: %w", s.id, runner.ErrClosed)
	}
	return runner.Usage{}, fmt.Errorf("stats of sandbox %s: the pod's cgroup is not readable from sandboxd: %w", s.id, runner.ErrUnavailable)
}

// Close implements runner.Sandbox: it closes the agent connection and
// deletes the Pod and its Secret. Idempotent.
func (s *Sandbox) Close(ctx context.Context) error {
	return s.r.in.CloseSandbox(ctx, s.id, func() (chan struct{}, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return s.done, true
		}
		s.closed, s.done = true, make(chan struct{})
		return s.done, false
	}, s.destroy)
}

func (s *Sandbox) destroy(ctx context.Context) error {
	if s.stopEgress != nil {
		s.stopEgress()
		s.egress.Close()
	}
	if s.client != nil {
		s.client.Close()
	}
	return s.r.remove(ctx, podName(s.id))
}
