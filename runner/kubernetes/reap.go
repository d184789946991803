package kubernetes

import (
	"context"
	"errors"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// managedSelector selects what this package labels.
const managedSelector = hostside.LabelManaged + "=true"

// Reap implements runner.Reaper: it deletes, in the namespace, the pods
// and secrets of sandboxes no live sandboxd holds (hostside.Instance.Orphan
// on their labels and owner annotations: this instance's that no open
// Sandbox holds, other owners' whose pod has gone or terminated, or
// without an owner pod whose process is dead: ownerCheck), and the state
// dirs of dead instances. The namespace's NetworkPolicy is shared and
// stays.
func (r *Runner) Reap(ctx context.Context) (int, error) {
	found, err := r.listSandboxes(ctx, managedSelector)
	if err != nil {
		return 0, err
	}
	reaped, live, err := r.in.ReapFound(ctx, found, r.ownerCheck(ctx), r.remove)
	return reaped, errors.Join(err, r.in.ReapStateDirs(live, func(dir string) error { return nil }))
}

// ReapReplica implements runner.ReplicaReaper: it deletes the pods and
// secrets of the sandboxes replica made (their sandboxd.replica label),
// whether its process lives or not (it lost its lease: a replica taking
// it over reaps them on a cluster every replica reaches), except those
// open in this process.
func (r *Runner) ReapReplica(ctx context.Context, replica string) (int, error) {
	if replica == "" || len(validation.IsValidLabelValue(replica)) > 0 {
		return 0, nil // no sandbox of it can carry the label
	}
	found, err := r.listSandboxes(ctx, managedSelector+","+hostside.LabelReplica+"="+replica)
	if err != nil {
		return 0, err
	}
	return r.in.ReapReplica(ctx, replica, found, r.remove)
}

// listSandboxes lists the sandboxes whose pod, or secret alone (a crash
// between the two creates), the label selector matches, by pod name.
func (r *Runner) listSandboxes(ctx context.Context, selector string) ([]hostside.Found, error) {
	cctx, cancel := context.WithTimeout(ctx, hostside.APITimeout)
	defer cancel()
	pods, err := r.c.CoreV1().Pods(r.cfg.Namespace).List(cctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, r.wrap("list pods", err)
	}
	found := make([]hostside.Found, 0, len(pods.Items))
	names := map[string]bool{}
	for _, p := range pods.Items {
		names[p.Name] = true
		found = append(found, hostside.Found{ID: p.Name, Labels: ownerLabels(p.Labels, p.Annotations), Created: p.CreationTimestamp.Time})
	}
	secs, err := r.c.CoreV1().Secrets(r.cfg.Namespace).List(cctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, r.wrap("list secrets", err)
	}
	for _, s := range secs.Items {
		if !names[s.Name] {
			found = append(found, hostside.Found{ID: s.Name, Labels: ownerLabels(s.Labels, s.Annotations), Created: s.CreationTimestamp.Time})
		}
	}
	return found, nil
}

// ownerLabels are an object's labels with its owner-proc and owner-pod
// annotations.
func ownerLabels(l, ann map[string]string) map[string]string {
	out := maps.Clone(l)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range []string{hostside.LabelOwnerProc, LabelOwnerPod} {
		if v, ok := ann[k]; ok {
			out[k] = v
		}
	}
	return out
}
