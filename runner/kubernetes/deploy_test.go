package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/kubernetes/internal/wsvol"
)

// The manifests of deploy/kubernetes: sandboxd itself in the cluster.
const manifestDir = "../../deploy/kubernetes"

// manifest is one decoded object and the file it came from.
type manifest struct {
	File string
	Obj  runtime.Object
}

// decodeManifests decodes every document of every manifest strictly
// (client-go's scheme: an unknown or duplicate field, an unknown kind
// fails).
func decodeManifests(t *testing.T, dir string) []manifest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	dec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var out []manifest
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			if onlyComments(doc) {
				continue
			}
			obj, _, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			out = append(out, manifest{File: filepath.Base(f), Obj: obj})
		}
	}
	return out
}

func onlyComments(doc []byte) bool {
	for l := range strings.SplitSeq(string(doc), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && l != "---" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func findObj[T runtime.Object](t *testing.T, ms []manifest, name string) T {
	t.Helper()
	for _, m := range ms {
		if o, ok := m.Obj.(T); ok && m.Obj.(metav1.Object).GetName() == name {
			return o
		}
	}
	var zero T
	t.Fatalf("no %T %q in %s", zero, name, manifestDir)
	return zero
}

// TestDeployManifests (no cluster): the manifests decode strictly, all in
// one namespace, and agree with the runner: its NetworkPolicy is the one
// buildPolicy makes with in-cluster defaults, the config names the
// manifests' namespace, the Deployment's pods carry the label the policy
// admits, the installer writes to the kubelet's seccomp root.
func TestDeployManifests(t *testing.T) {
	ms := decodeManifests(t, manifestDir)
	ns := findObj[*corev1.Namespace](t, ms, DefaultNamespace)
	for _, m := range ms {
		o := m.Obj.(metav1.Object)
		if _, ok := m.Obj.(*corev1.Namespace); !ok && o.GetNamespace() != ns.Name {
			t.Errorf("%s: %s in namespace %q, not %q", m.File, o.GetName(), o.GetNamespace(), ns.Name)
		}
	}
	want, err := buildPolicy(ns.Name, DefaultAgentPort, "", "app.kubernetes.io/name=sandboxd")
	if err != nil {
		t.Fatal(err)
	}
	got := findObj[*networkingv1.NetworkPolicy](t, ms, PolicyName)
	if !apiequality.Semantic.DeepEqual(got.Spec, want.Spec) || !apiequality.Semantic.DeepEqual(got.Labels, want.Labels) {
		g, _ := json.Marshal(got.Spec)
		w, _ := json.Marshal(want.Spec)
		t.Errorf("NetworkPolicy %s differs from the runner's:\n got %s\nwant %s", PolicyName, g, w)
	}
	dep := findObj[*appsv1.Deployment](t, ms, "sandboxd")
	if dep.Spec.Template.Labels["app.kubernetes.io/name"] != "sandboxd" {
		t.Errorf("the sandboxd pods lack the label the policy admits: %v", dep.Spec.Template.Labels)
	}
	if _, ok := dep.Spec.Template.Labels[hostside.LabelManaged]; ok {
		t.Errorf("the sandboxd pods carry the sandboxes' label %s", hostside.LabelManaged)
	}
	if *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("SQLite: want 1 replica, Recreate; got %d, %s", *dep.Spec.Replicas, dep.Spec.Strategy.Type)
	}
	// The pod's own identity, for Config.OwnerPod (runner.kubernetes.pod_*),
	// and the Role's get on pods that judging another replica's takes.
	fields := map[string]string{}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fields[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	for env, path := range map[string]string{"SANDBOXD_POD_NAME": "metadata.name", "SANDBOXD_POD_NAMESPACE": "metadata.namespace", "SANDBOXD_POD_UID": "metadata.uid"} {
		if fields[env] != path {
			t.Errorf("sandboxd's env %s: field %q, want the downward API's %s", env, fields[env], path)
		}
	}
	getPods := false
	for _, rule := range findObj[*rbacv1.Role](t, ms, "sandboxd-runner").Rules {
		getPods = getPods || (slices.Contains(rule.Resources, "pods") && slices.Contains(rule.Verbs, "get") && len(rule.ResourceNames) == 0)
	}
	if !getPods {
		t.Error("the Role does not let sandboxd get pods (an owner pod of another replica)")
	}
	if sa := dep.Spec.Template.Spec.ServiceAccountName; sa != findObj[*corev1.ServiceAccount](t, ms, "sandboxd").Name {
		t.Errorf("service account %q", sa)
	}
	cm := findObj[*corev1.ConfigMap](t, ms, "sandboxd-config")
	if !strings.Contains(cm.Data["sandboxd.yaml"], "namespace: "+ns.Name+"\n") || !strings.Contains(cm.Data["sandboxd.yaml"], "name: kubernetes\n") {
		t.Errorf("the config does not name runner kubernetes in namespace %s:\n%s", ns.Name, cm.Data["sandboxd.yaml"])
	}
	rb := findObj[*rbacv1.RoleBinding](t, ms, "sandboxd-runner")
	if rb.RoleRef.Kind != "Role" || len(rb.Subjects) != 1 || rb.Subjects[0].Namespace != ns.Name {
		t.Errorf("RoleBinding: %+v", rb)
	}
	ds := findObj[*appsv1.DaemonSet](t, ms, "sandboxd-seccomp")
	hp := ds.Spec.Template.Spec.Volumes[0].HostPath
	if hp == nil || hp.Path != "/var/lib/kubelet/seccomp" {
		t.Errorf("seccomp installer: hostPath %+v", hp)
	}
	for _, m := range ms {
		if _, ok := m.Obj.(*rbacv1.ClusterRole); ok {
			t.Errorf("%s: a ClusterRole: the runner needs none", m.File)
		}
	}
}

// TestDeployWorkspaceCSI (no cluster): the optional workspace driver's
// manifests decode strictly and agree with the runner and the image: the
// CSIDriver of wsvol.DefaultDriver serves inline volumes only, needs no
// attach and changes no ownership; the node plugin is the image's binary
// with only flags it has, privileged (loop devices, mounts) with the
// kubelet's directory mounted Bidirectional where --kubelet-dir says, in a
// namespace of its own that admits it; the config names the driver for
// the operator to enable.
func TestDeployWorkspaceCSI(t *testing.T) {
	ms := decodeManifests(t, filepath.Join(manifestDir, "workspace-csi"))
	d := findObj[*storagev1.CSIDriver](t, ms, wsvol.DefaultDriver)
	// podInfoOnMount: only then does the kubelet add the
	// csi.storage.k8s.io/ephemeral attribute the driver requires.
	if s := d.Spec; s.AttachRequired == nil || *s.AttachRequired || s.PodInfoOnMount == nil || !*s.PodInfoOnMount || !slices.Equal(s.VolumeLifecycleModes, []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral}) ||
		s.FSGroupPolicy == nil || *s.FSGroupPolicy != storagev1.NoneFSGroupPolicy {
		t.Errorf("CSIDriver spec %+v", s)
	}
	ds := findObj[*appsv1.DaemonSet](t, ms, "sandboxd-workspace")
	ns := findObj[*corev1.Namespace](t, ms, ds.Namespace)
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %s does not admit the privileged plugin: %v", ns.Name, ns.Labels)
	}
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	dockerfile, err := os.ReadFile("../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Command) != 1 || !strings.Contains(string(dockerfile), "COPY bin/k8s-workspace "+c.Command[0]+"\n") {
		t.Errorf("command %v is not the image's k8s-workspace", c.Command)
	}
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Errorf("the plugin is not privileged: %+v", c.SecurityContext)
	}
	args := map[string]string{}
	for _, a := range c.Args {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !slices.Contains([]string{"root", "kubelet-dir", "node-id", "max-bytes", "name"}, k) {
			t.Errorf("argument %q: k8s-workspace has no such flag (or it lacks =value)", a)
		}
		args[k] = v
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	kubeletMounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == args["kubelet-dir"] && hostPaths[m.Name] == args["kubelet-dir"] && m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
			kubeletMounted = true
		}
	}
	if !kubeletMounted || args["root"] == "" {
		t.Errorf("the kubelet's directory %q is not mounted Bidirectional at the same path (mounts %+v), or no --root", args["kubelet-dir"], c.VolumeMounts)
	}
	cm := findObj[*corev1.ConfigMap](t, decodeManifests(t, manifestDir), "sandboxd-config")
	if !strings.Contains(cm.Data["sandboxd.yaml"], "workspace_driver: "+wsvol.DefaultDriver+"\n") {
		t.Errorf("the config does not name the driver %s", wsvol.DefaultDriver)
	}
}

// deployEnv is what TestDeployInCluster needs besides the cluster: docker
// (to build the sandboxd image), ctr and the node's containerd socket (to
// load it), the kubelet's seccomp root.
type deployEnv struct {
	docker, ctr, sock, seccompDir string
}

func deployTools(t *testing.T) deployEnv {
	t.Helper()
	state := os.Getenv("K8S_STATE")
	if state == "" {
		state = "/var/lib/sandboxd-k8s"
	}
	e := deployEnv{sock: filepath.Join(state, "containerd/containerd.sock"), seccompDir: filepath.Join(state, "kubelet/seccomp")}
	var err error
	var missing []string
	if e.docker, err = exec.LookPath("docker"); err != nil {
		missing = append(missing, "docker")
	}
	if e.ctr, err = exec.LookPath("ctr"); err != nil {
		missing = append(missing, "ctr")
	}
	if _, err := os.Stat(e.sock); err != nil {
		missing = append(missing, e.sock)
	}
	if len(missing) > 0 {
		if os.Getenv("SANDBOXD_REQUIRE_KUBERNETES") != "" {
			t.Fatalf("SANDBOXD_REQUIRE_KUBERNETES is set but %v missing", missing)
		}
		t.Skipf("%v missing", missing)
	}
	return e
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// buildImage builds deploy/Dockerfile's sandboxd image from this checkout
// (the binaries as deploy/build.sh builds them) as tag and imports it into
// the node's containerd (k8s.io namespace), as scripts/k8s-setup.sh loads
// sandboxd/python: docker save, ctr import. No registry.
func buildImage(t *testing.T, e deployEnv, tag string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctxDir := t.TempDir()
	run(t, root, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", filepath.Join(ctxDir, "bin")+"/",
		"./cmd/sandboxd", "./cmd/sandbox-agent", "./runner/kubernetes/cmd/k8s-seccomp", "./runner/kubernetes/cmd/k8s-workspace")
	for _, f := range []string{"Dockerfile", "entrypoint.sh"} {
		b, err := os.ReadFile(filepath.Join(root, "deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ctxDir, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run(t, ctxDir, []string{"DOCKER_BUILDKIT=0"}, e.docker, "build", "-q", "-t", tag, ctxDir)
	t.Cleanup(func() { exec.Command(e.docker, "rmi", tag).Run() })
	tar := filepath.Join(ctxDir, "image.tar")
	run(t, ctxDir, nil, e.docker, "save", "-o", tar, tag)
	run(t, ctxDir, nil, e.ctr, "-a", e.sock, "-n", "k8s.io", "images", "import", "--snapshotter", "overlayfs", tar)
	t.Cleanup(func() { exec.Command(e.ctr, "-a", e.sock, "-n", "k8s.io", "images", "rm", "docker.io/"+tag).Run() })
}

// freePort is a TCP port free on addr now.
func freePort(t *testing.T, addr string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// adaptForTestCluster rewrites the manifests for a namespace of the
// test's own, the test's image tag, and scripts/k8s-setup.sh's node: its
// apiserver listens on 127.0.0.1 only and there is no kube-proxy, so the
// kubernetes Service's ClusterIP leads nowhere and pods cannot reach the
// apiserver; sandboxd's pod runs on the host network there
// (KUBERNETES_SERVICE_HOST/PORT the apiserver's loopback address, its API
// on the node IP at free ports) and dials the agents from the node's
// address, so the runner's policy admits that CIDR
// (SANDBOXD_KUBERNETES_SANDBOXD_CIDR) instead of the pod label; the
// kubelet's root dir is K8S_STATE/kubelet.
func adaptForTestCluster(t *testing.T, ms []manifest, ns, image, apiHost, apiPort, nodeIP, cidr, seccompDir string, port, metricsPort int) {
	t.Helper()
	for _, m := range ms {
		o := m.Obj.(metav1.Object)
		if _, ok := m.Obj.(*corev1.Namespace); ok {
			o.SetName(ns)
		} else {
			o.SetNamespace(ns)
		}
		setImage := func(spec *corev1.PodSpec) {
			for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
				for i := range cs {
					if cs[i].Image == "sandboxd/sandboxd:local" {
						cs[i].Image = image
					}
				}
			}
		}
		switch x := m.Obj.(type) {
		case *rbacv1.RoleBinding:
			for i := range x.Subjects {
				x.Subjects[i].Namespace = ns
			}
		case *corev1.ConfigMap:
			c := x.Data["sandboxd.yaml"]
			for _, r := range [][2]string{
				{"namespace: " + DefaultNamespace + "\n", "namespace: " + ns + "\n"},
				{"addr: 0.0.0.0:8080\n", fmt.Sprintf("addr: %s:%d\n", nodeIP, port)},
				{"metrics_addr: 0.0.0.0:9464\n", fmt.Sprintf("metrics_addr: 127.0.0.1:%d\n", metricsPort)},
			} {
				if !strings.Contains(c, r[0]) {
					t.Fatalf("config: no %q to rewrite", r[0])
				}
				c = strings.Replace(c, r[0], r[1], 1)
			}
			x.Data["sandboxd.yaml"] = c
		case *appsv1.Deployment:
			spec := &x.Spec.Template.Spec
			setImage(spec)
			spec.HostNetwork = true
			c := &spec.Containers[0]
			c.Env = append(c.Env,
				corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: apiHost},
				corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: apiPort},
				corev1.EnvVar{Name: "SANDBOXD_KUBERNETES_SANDBOXD_CIDR", Value: cidr},
				// This 2-core node also holds the pool's prestarted pods:
				// each requests a tenth of its CPU limit, so that the
				// job's own pod is schedulable beside them.
				corev1.EnvVar{Name: "SANDBOXD_KUBERNETES_CPU_REQUEST_PERCENT", Value: "10"})
			// The node's workspace driver (scripts/k8s-setup.sh runs
			// it on the host, as workspace-csi/ would in a DaemonSet).
			if d := os.Getenv("SANDBOXD_KUBERNETES_WORKSPACE_DRIVER"); d != "" {
				c.Env = append(c.Env, corev1.EnvVar{Name: "SANDBOXD_KUBERNETES_WORKSPACE_DRIVER", Value: d})
			}
			for i := range c.Ports {
				switch c.Ports[i].Name {
				case "http":
					c.Ports[i].ContainerPort = int32(port)
				case "metrics":
					c.Ports[i].ContainerPort = int32(metricsPort)
				}
			}
		case *appsv1.DaemonSet:
			setImage(&x.Spec.Template.Spec)
			for _, v := range x.Spec.Template.Spec.Volumes {
				if v.HostPath != nil {
					v.HostPath.Path = seccompDir
				}
			}
		}
	}
}

// apply server-side-applies every manifest (strict field validation),
// only as a dry run with dryRun.
func apply(ctx context.Context, t *testing.T, dyn dynamic.Interface, mapper meta.RESTMapper, ms []manifest, dryRun bool) {
	t.Helper()
	for _, m := range ms {
		gvk := m.Obj.GetObjectKind().GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", m.File, err)
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m.Obj)
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{Object: u}
		obj.SetGroupVersionKind(gvk)
		unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(obj.Object, "status")
		data, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		opts := metav1.PatchOptions{FieldManager: "sandboxd-deploy-test", Force: ptr(true), FieldValidation: "Strict"}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts); err != nil {
			t.Fatalf("%s: apply %s %s (dry run %v): %v", m.File, gvk.Kind, obj.GetName(), dryRun, err)
		}
	}
}

// TestDeployInCluster applies deploy/kubernetes to the real cluster in a
// namespace of its own (a server-side dry run of every manifest first),
// with the sandboxd image built from this checkout and loaded into the
// node's containerd; waits for the seccomp installer and the sandboxd pod
// to be Ready; runs a python job through the in-cluster sandboxd's API at
// its pod IP (the test cluster has neither kube-proxy nor DNS: no Service
// address works) and checks it ran in a sandbox pod of that namespace;
// deletes the namespace (everything it made) at the end.
func TestDeployInCluster(t *testing.T) {
	cfg := clusterConfig(t)
	e := deployTools(t)
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(cs.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	api, err := url.Parse(rc.Host)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SandboxdCIDR == "" {
		t.Fatal("SANDBOXD_KUBERNETES_SANDBOXD_CIDR unset: the node address sandboxd's host-network pod dials from")
	}
	nodeIP, _, _ := strings.Cut(cfg.SandboxdCIDR, "/")

	var rnd [4]byte
	rand.Read(rnd[:])
	suffix := hex.EncodeToString(rnd[:])
	ns := "sbxdeploy-" + suffix
	image := "sandboxd/sandboxd:deploytest-" + suffix
	port, metricsPort := freePort(t, nodeIP), freePort(t, "127.0.0.1")
	ms := decodeManifests(t, manifestDir)
	adaptForTestCluster(t, ms, ns, image, api.Hostname(), api.Port(), nodeIP, cfg.SandboxdCIDR, e.seccompDir, port, metricsPort)

	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	// The namespace first (a dry run, then for real: the namespaced dry
	// runs need it), then a dry run of all.
	nsIdx := slices.IndexFunc(ms, func(m manifest) bool { _, ok := m.Obj.(*corev1.Namespace); return ok })
	apply(ctx, t, dyn, mapper, ms[nsIdx:nsIdx+1], true)
	apply(ctx, t, dyn, mapper, ms[nsIdx:nsIdx+1], false)
	t.Cleanup(func() { deleteNamespace(t, cs, ns) })
	apply(ctx, t, dyn, mapper, ms, true)
	t.Logf("strict decode and server-side dry run of %d objects: ok (%s)", len(ms), time.Since(start).Round(time.Millisecond))

	buildImage(t, e, image)
	t.Logf("image %s built and loaded (%s)", image, time.Since(start).Round(time.Millisecond))
	key := "deploytest-" + suffix + "-key"
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sandboxd-api-keys", Namespace: ns},
		StringData: map[string]string{"api-keys": key + ":default"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apply(ctx, t, dyn, mapper, ms, false)

	// Watch the sandbox pods from now on.
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: managedSelector})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	seen := make(chan string, 100)
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				select {
				case seen <- p.Name:
				default:
				}
			}
		}
	}()

	waitReady(ctx, t, cs, ns, "app.kubernetes.io/name=sandboxd-seccomp")
	pod := waitReady(ctx, t, cs, ns, "app.kubernetes.io/name=sandboxd")
	t.Logf("sandboxd pod %s Ready at %s (%s)", pod.Name, pod.Status.PodIP, time.Since(start).Round(time.Millisecond))

	base := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))
	body := `{"tool":"python_repl","arguments":{"code":"import socket, os\nprint(socket.gethostname(), os.getuid())"}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/jobs?wait=true", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var job struct {
		ID     string `json:"id"`
		State  string `json:"state"`
		Runner string `json:"runner"`
		Result struct {
			OK      bool `json:"ok"`
			Process struct {
				ExitCode int    `json:"exit_code"`
				Stdout   string `json:"stdout"`
			} `json:"process"`
		} `json:"result"`
	}
	if err := json.Unmarshal(rb, &job); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/jobs: %d %s: %v", resp.StatusCode, rb, err)
	}
	t.Logf("job: %s", rb)
	sandboxes, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: managedSelector})
	if err != nil {
		t.Fatal(err)
	}
	if job.State != "succeeded" || job.Runner != "kubernetes" || !job.Result.OK {
		for _, p := range sandboxes.Items {
			st, _ := json.Marshal(p.Status.Conditions)
			t.Logf("sandbox pod %s: %s %s", p.Name, p.Status.Phase, st)
		}
		t.Fatalf("job %s: state %s, runner %s, ok %v", job.ID, job.State, job.Runner, job.Result.OK)
	}
	for _, p := range sandboxes.Items { // runner.kubernetes.cpu_request_percent: 10
		r := p.Spec.Containers[0].Resources
		if req, lim := r.Requests.Cpu().MilliValue(), r.Limits.Cpu().MilliValue(); req != lim/10 {
			t.Errorf("sandbox pod %s requests %dm of CPU, limit %dm: want a tenth", p.Name, req, lim)
		}
		// The Deployment's downward API: the owner is sandboxd's pod.
		if got, want := p.Annotations[LabelOwnerPod], ns+"/"+pod.Name+"/"+string(pod.UID); got != want {
			t.Errorf("sandbox pod %s: owner pod %q, want %q", p.Name, got, want)
		}
	}
	t.Logf("%d sandbox pods of owner pod %s", len(sandboxes.Items), pod.Name)
	// The pod spec's hostname, the code's uid (policy.CodeUID).
	if got := strings.TrimSpace(job.Result.Process.Stdout); got != "sandbox 65534" {
		t.Errorf("the code printed %q, want \"sandbox 65534\" (a sandbox pod's hostname and the code's uid)", got)
	}
	select {
	case name := <-seen:
		t.Logf("sandbox pod %s in %s", name, ns)
	case <-time.After(5 * time.Second):
		t.Error("no sandbox pod (label " + managedSelector + ") appeared in " + ns)
	}
	t.Logf("total %s", time.Since(start).Round(time.Millisecond))
}

// waitReady waits for one pod of selector in ns to be Ready; on timeout
// it fails with every such pod's status and its containers' logs.
func waitReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, selector string) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Status.PodIP != "" {
					return p
				}
			}
		}
		crashed := false
		for _, p := range pods.Items {
			for _, c := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
				crashed = crashed || c.RestartCount > 1
			}
		}
		if crashed || time.Now().After(deadline) || ctx.Err() != nil {
			var b strings.Builder
			for _, p := range pods.Items {
				st, _ := json.MarshalIndent(p.Status, "", " ")
				fmt.Fprintf(&b, "pod %s: %s\n", p.Name, st)
				for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
					logs, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(context.Background())
					fmt.Fprintf(&b, "--- %s/%s logs (%v):\n%s\n", p.Name, c.Name, err, logs)
				}
			}
			evs, _ := cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
			if evs != nil {
				for _, ev := range evs.Items {
					fmt.Fprintf(&b, "event %s %s: %s %s\n", ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message)
				}
			}
			t.Fatalf("no Ready pod %s in %s:\n%s", selector, ns, b.String())
		}
		time.Sleep(time.Second)
	}
}

// deleteNamespace deletes ns and waits (up to 2 min) until it is gone.
func deleteNamespace(t *testing.T, cs kubernetes.Interface, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete namespace %s: %v", ns, err)
		return
	}
	for {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if ctx.Err() != nil {
			t.Errorf("namespace %s not gone after 2 min: %v", ns, err)
			return
		}
		time.Sleep(time.Second)
	}
}
