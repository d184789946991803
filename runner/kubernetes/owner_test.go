package kubernetes

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// TestFakeReapOwnerPod is the decision table of another instance's
// objects that record their owner's pod: the pod gone, of another uid or
// terminated makes them orphans, a live one or an apiserver that does not
// answer keeps them, whatever their owner-proc says; the runner's own pod
// and a malformed record fall back to the process; this instance's own
// objects keep the rule of its open sandboxes. Each owner pod is asked
// once per Reap.
func TestFakeReapOwnerPod(t *testing.T) {
	cs, port := fakeCluster(t)
	self := OwnerPod{Namespace: "sb", Name: "sandboxd-self", UID: "uid-self"}
	r := newFake(t, cs, port, func(c *Config) { c.OwnerPod = self; c.ReconcileInterval = -1 })
	ctx := t.Context()
	now := metav1.Now()
	owner := func(name, uid string, mod func(*corev1.Pod)) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sb", UID: types.UID(uid)},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "sandboxd", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
		if mod != nil {
			mod(p)
		}
		if err := cs.Tracker().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	owner("o-running", "u-running", nil)
	owner("o-pending", "u-pending", func(p *corev1.Pod) { p.Status = corev1.PodStatus{Phase: corev1.PodPending} })
	owner("o-uid", "u-new", nil)
	owner("o-succeeded", "u-succeeded", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })
	owner("o-failed", "u-failed", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	owner("o-stopping", "u-stopping", func(p *corev1.Pod) { p.DeletionTimestamp = &now })
	owner("o-stopped", "u-stopped", func(p *corev1.Pod) {
		p.DeletionTimestamp = &now
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	})
	owner("o-unstarted", "u-unstarted", func(p *corev1.Pod) {
		p.DeletionTimestamp = &now
		p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	})
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "other" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, a.(k8stesting.GetAction).GetName(), nil)
		}
		return false, nil, nil
	})

	old := metav1.NewTime(time.Now().Add(-time.Hour))
	dead := "999999999:1"
	mk := func(name, instance, ownerPod, proc string) {
		meta := metav1.ObjectMeta{Name: name, Namespace: "sb", CreationTimestamp: old,
			Labels:      map[string]string{hostside.LabelManaged: "true", hostside.LabelOwner: instance, hostside.LabelSandbox: name},
			Annotations: map[string]string{hostside.LabelOwnerProc: proc, LabelOwnerPod: ownerPod}}
		if ownerPod == "" {
			delete(meta.Annotations, LabelOwnerPod)
		}
		cs.Tracker().Add(&corev1.Pod{ObjectMeta: meta})
		cs.Tracker().Add(&corev1.Secret{ObjectMeta: meta})
	}
	for _, tc := range []struct {
		name, instance, ownerPod, proc string
		orphan                         bool
	}{
		{"running", "a", "sb/o-running/u-running", dead, false},
		{"running2", "a2", "sb/o-running/u-running", dead, false},
		{"pending", "b", "sb/o-pending/u-pending", dead, false},
		{"stopping", "c", "sb/o-stopping/u-stopping", dead, false},
		{"forbidden", "d", "other/o-x/u-x", dead, false},
		{"gone", "e", "sb/o-gone/u-gone", hostside.SelfProc(), true},
		{"uid", "f", "sb/o-uid/u-old", hostside.SelfProc(), true},
		{"succeeded", "g", "sb/o-succeeded/u-succeeded", hostside.SelfProc(), true},
		{"failed", "h", "sb/o-failed/u-failed", hostside.SelfProc(), true},
		{"stopped", "i", "sb/o-stopped/u-stopped", hostside.SelfProc(), true},
		{"unstarted", "j", "sb/o-unstarted/u-unstarted", hostside.SelfProc(), true},
		// An earlier process of this runner's own pod: by its process.
		{"selfpod-live", "k", self.String(), hostside.SelfProc(), false},
		{"selfpod-dead", "l", self.String(), dead, true},
		// A malformed or missing record: by the process.
		{"malformed-live", "m", "sb/o-running", hostside.SelfProc(), false},
		{"malformed-dead", "n", "sb//u", dead, true},
		{"none-live", "o", "", hostside.SelfProc(), false},
		{"none-dead", "p", "", dead, true},
		// This instance's, not held: its owner pod lives, yet it is an orphan.
		{"mine", r.in.ID, "sb/o-running/u-running", hostside.SelfProc(), true},
	} {
		mk(tc.name, tc.instance, tc.ownerPod, tc.proc)
		defer func() {
			_, err := cs.CoreV1().Pods("sb").Get(ctx, tc.name, metav1.GetOptions{})
			if left := err == nil; left == tc.orphan {
				t.Errorf("%s: pod left %v, want orphan %v", tc.name, left, tc.orphan)
			}
			_, err = cs.CoreV1().Secrets("sb").Get(ctx, tc.name, metav1.GetOptions{})
			if left := err == nil; left == tc.orphan {
				t.Errorf("%s: secret left %v, want orphan %v", tc.name, left, tc.orphan)
			}
		}()
	}
	cs.ClearActions()
	n, err := r.Reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 10 {
		t.Errorf("reaped %d, want 10", n)
	}
	var gets []string
	for _, a := range cs.Actions() {
		if g, ok := a.(k8stesting.GetAction); ok && a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
			gets = append(gets, a.GetNamespace()+"/"+g.GetName())
		}
	}
	slices.Sort(gets)
	if want := []string{"other/o-x", "sb/o-failed", "sb/o-gone", "sb/o-pending", "sb/o-running", "sb/o-stopped", "sb/o-stopping", "sb/o-succeeded", "sb/o-uid", "sb/o-unstarted"}; !slices.Equal(gets, want) {
		t.Errorf("owner pods asked: %v\nwant once each: %v", gets, want)
	}
}

// TestFakeOwnerPodRecorded: with OwnerPod, the sandbox's pod and secret
// carry it (and the owner-proc); a partial or bad OwnerPod is refused.
func TestFakeOwnerPodRecorded(t *testing.T) {
	cs, port := fakeCluster(t)
	self := OwnerPod{Namespace: "sb", Name: "sandboxd-0", UID: "0d9f7c1e-uid"}
	r := newFake(t, cs, port, func(c *Config) { c.OwnerPod = self })
	p := startTestPod(t, r, "own", "")
	pod, err := cs.CoreV1().Pods("sb").Get(t.Context(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := cs.CoreV1().Secrets("sb").Get(t.Context(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for what, ann := range map[string]map[string]string{"pod": pod.Annotations, "secret": sec.Annotations} {
		if ann[LabelOwnerPod] != "sb/sandboxd-0/0d9f7c1e-uid" || ann[hostside.LabelOwnerProc] == "" {
			t.Errorf("%s annotations %v", what, ann)
		}
	}
	for _, bad := range []OwnerPod{{Name: "x"}, {Namespace: "sb", Name: "x"}, {Namespace: "sb", UID: "u"}, {Namespace: "Bad", Name: "x", UID: "u"}, {Namespace: "sb", Name: "x", UID: "a/b"}} {
		cfg := Config{Client: cs, StateDir: t.TempDir(), ReconcileInterval: -1, Namespace: "sb", OwnerPod: bad}
		if r, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "owner pod") {
			if r != nil {
				r.Close(context.Background())
			}
			t.Errorf("OwnerPod %+v: %v, want refused", bad, err)
		}
	}
}
