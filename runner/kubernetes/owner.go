package kubernetes

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// LabelOwnerPod is the annotation that records, on every pod and secret
// of a runner with Config.OwnerPod, the sandboxd pod that owns them
// (OwnerPod.String: "namespace/name/uid"). Inside the cluster every
// sandboxd pod has a pid namespace of its own, so the owner-proc
// annotation (hostside.LabelOwnerProc) names a process that another
// replica cannot see; the owner's pod, asked of the apiserver, it can.
const LabelOwnerPod = "sandboxd.owner-pod"

// OwnerPod names the pod a sandboxd process runs in (the downward API's
// metadata.namespace, metadata.name and metadata.uid). The zero value:
// not in a pod.
type OwnerPod struct {
	Namespace, Name, UID string
}

// IsZero reports whether o names no pod.
func (o OwnerPod) IsZero() bool { return o == OwnerPod{} }

// String is o's LabelOwnerPod value.
func (o OwnerPod) String() string { return o.Namespace + "/" + o.Name + "/" + o.UID }

// check reports what is wrong with a non-zero o.
func (o OwnerPod) check() error {
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return fmt.Errorf("kubernetes: owner pod namespace %q: %v", o.Namespace, errs)
	}
	if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 {
		return fmt.Errorf("kubernetes: owner pod name %q: %v", o.Name, errs)
	}
	if o.UID == "" || strings.ContainsAny(o.UID, "/ \t\n") {
		return fmt.Errorf("kubernetes: owner pod uid %q: want the pod's metadata.uid", o.UID)
	}
	return nil
}

// parseOwnerPod parses a LabelOwnerPod value; ok is false when it is
// malformed.
func parseOwnerPod(v string) (o OwnerPod, ok bool) {
	f := strings.Split(v, "/")
	if len(f) != 3 {
		return OwnerPod{}, false
	}
	o = OwnerPod{Namespace: f[0], Name: f[1], UID: f[2]}
	return o, o.check() == nil
}

// ownerCheck is Reap's hostside.OwnerCheck, for the objects of other
// instances (this instance's own keep the rule of its open Sandboxes):
//
//   - without a LabelOwnerPod annotation, or with a malformed one, or
//     with this process's own pod (an earlier sandboxd process of this
//     pod: its container restarted; the pid namespace is the pod's, so
//     the process rule holds): the owner-proc process, hostside.ProcOwner;
//   - otherwise the owner's pod, asked of the apiserver once per Reap:
//     dead (the objects are orphans) when it is not found, has another
//     uid (a pod of the same name made anew), or has terminated (podLive);
//     any other answer of the apiserver, or none, is alive: never reap on
//     doubt.
//
// A live pod whose sandboxd container restarted keeps its earlier
// process's objects until the new process reaps them (the own-pod case).
func (r *Runner) ownerCheck(ctx context.Context) hostside.OwnerCheck {
	type answer struct {
		pod *corev1.Pod
		err error
	}
	seen := map[string]answer{} // by namespace/name
	return func(labels map[string]string) (alive, known bool) {
		ref, ok := parseOwnerPod(labels[LabelOwnerPod])
		if !ok || (!r.cfg.OwnerPod.IsZero() && ref.UID == r.cfg.OwnerPod.UID) {
			return hostside.ProcOwner(labels)
		}
		key := ref.Namespace + "/" + ref.Name
		a, ok := seen[key]
		if !ok {
			cctx, cancel := context.WithTimeout(ctx, hostside.APITimeout)
			a.pod, a.err = r.c.CoreV1().Pods(ref.Namespace).Get(cctx, ref.Name, metav1.GetOptions{})
			cancel()
			if a.err != nil && !apierrors.IsNotFound(a.err) {
				r.cfg.Logger.Warn("kubernetes runner: cannot tell whether a sandbox owner's pod lives: its sandboxes stay", "pod", key, "err", a.err)
			}
			seen[key] = a
		}
		switch {
		case apierrors.IsNotFound(a.err):
			return false, true
		case a.err != nil:
			return true, true
		case string(a.pod.UID) != ref.UID:
			return false, true
		}
		return podLive(a.pod), true
	}
}

// podLive reports whether the sandboxd of pod p may still run: not when p
// has terminated (phase Succeeded or Failed: every container ended and
// none restarts), nor when p is being deleted and none of its containers
// runs any more (they stopped after their grace period and never start
// again). A pod being deleted whose containers run is live: its sandboxd
// is shutting down and may still use its sandboxes. A pod on a lost node
// stays live (its status is the last the kubelet sent) until its object
// is removed: its sandboxd may still run there.
func podLive(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if p.DeletionTimestamp == nil {
		return true
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running != nil {
			return true
		}
	}
	return false
}
