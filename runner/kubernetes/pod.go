package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/kubernetes/internal/wsvol"
)

// Paths inside a sandbox pod.
const (
	tokenDir  = runner.AgentDir + "/token" // the Secret, 0400 root's
	tokenKey  = "token"
	filterKey = "seccomp" // the code's raw filter (agent --code-seccomp)
	container = "sandbox"
	// fillContainer is the init container of a pod with a read-only
	// workspace: the same agent with the workspace emptyDir writable,
	// which sandboxd fills and then shuts down; the sandbox container
	// mounts that emptyDir read-only.
	fillContainer = "workspace-fill"
)

// podName is the Pod's (and its Secret's) name for sandbox id: a
// DNS-1123 label, whatever the ID's case and punctuation.
func podName(id string) string {
	lower := strings.ToLower(id)
	if lower == id && !strings.ContainsAny(id, "_.") && len(id) <= 50 {
		return "sandbox-" + id
	}
	sum := sha256.Sum256([]byte(id))
	return "sandbox-" + hex.EncodeToString(sum[:10])
}

// ProfileName is the Localhost seccomp profile (relative to the kubelet's
// seccomp root) of a seccomp policy: dir and a hash of its JSON, so a
// stale or edited file on a node is never taken for another policy's.
func ProfileName(dir string, sc *specs.LinuxSeccomp) (string, []byte, error) {
	b, err := json.Marshal(sc)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(b)
	return path.Join(dir, "sandboxd-"+hex.EncodeToString(sum[:8])+".json"), b, nil
}

// podInput is everything one sandbox's Pod depends on.
type podInput struct {
	Name, Namespace string
	Spec            runner.SandboxSpec
	Limits          runner.Limits
	Labels          map[string]string
	Annotations     map[string]string
	Image           string
	AgentBinary     string
	AgentPort       int
	RuntimeClass    string
	// Seccomp is the pod's profile: Localhost with its name, or
	// RuntimeDefault (the operator's fallback).
	Seccomp  corev1.SeccompProfile
	TmpBytes int64
	// CPURequestPercent is Config.CPURequestPercent (0: 100).
	CPURequestPercent int
	// WorkspaceDriver is Config.WorkspaceDriver.
	WorkspaceDriver string
}

// agentCaps are the agent's capabilities in Kubernetes' spelling (no
// "CAP_" prefix).
func agentCaps() []corev1.Capability {
	var out []corev1.Capability
	for _, n := range policy.AgentCapabilityNames() {
		out = append(out, corev1.Capability(strings.TrimPrefix(n, "CAP_")))
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// buildPod is the whole isolation of one sandbox as a Pod: the agent as
// pid 1 (uid 0 with only the agent's capabilities, no privilege
// escalation: no_new_privs) running the code as uid 65534 without any,
// a read-only root, memory-backed /tmp and /dev/shm, the workspace an
// emptyDir of the disk limit, the token Secret 0400 (only the agent reads
// it), no service account token, no service links, no host namespaces or
// paths, the policy's seccomp profile, limits equal to requests. A
// read-only workspace (the file_read row) is mounted read-only in the
// sandbox container, the only container that runs code; the init
// container fillContainer (the agent alone, the same isolation) has it
// writable for sandboxd to fill before the sandbox container starts.
// Pure: tests check it without a cluster.
func buildPod(in podInput) *corev1.Pod {
	l := in.Limits
	tmpSize, _ := l.Tmpfs(in.TmpBytes)
	cmd := []string{"/usr/bin/env", "-i", in.AgentBinary,
		"--listen-tcp", fmt.Sprintf("0.0.0.0:%d", in.AgentPort), "--token-file", path.Join(tokenDir, tokenKey),
		"--code-seccomp", path.Join(tokenDir, filterKey), "--cgroup-usage", "--kill-strays",
		"--root", runner.WorkspaceDir, "--uid", fmt.Sprint(policy.CodeUID), "--gid", fmt.Sprint(policy.CodeGID)}
	fillCmd := append([]string(nil), cmd...) // no egress: it runs no code
	ports := []corev1.ContainerPort{{Name: "agent", ContainerPort: int32(in.AgentPort), Protocol: corev1.ProtocolTCP}}
	if in.Spec.Isolation.Network == runner.NetworkEgress {
		// The proxy on the pod's loopback, carried over connections
		// sandboxd opens to the next port (egress.go).
		cmd = append(cmd, "--egress-listen", runner.EgressProxyAddr, "--egress-reverse", fmt.Sprintf("0.0.0.0:%d", in.AgentPort+1))
		ports = append(ports, corev1.ContainerPort{Name: "egress", ContainerPort: int32(in.AgentPort + 1), Protocol: corev1.ProtocolTCP})
	}
	mounts := []corev1.VolumeMount{
		{Name: "tmp", MountPath: "/tmp"},
		{Name: "shm", MountPath: "/dev/shm"},
		{Name: "token", MountPath: tokenDir, ReadOnly: true},
	}
	volumes := []corev1.Volume{
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(tmpSize, resource.BinarySI)}}},
		{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(tmpSize, resource.BinarySI)}}},
		{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: in.Name, DefaultMode: ptr(int32(0o400)), Items: []corev1.KeyToPath{{Key: tokenKey, Path: tokenKey, Mode: ptr(int32(0o400))}, {Key: filterKey, Path: filterKey, Mode: ptr(int32(0o400))}},
		}}},
	}
	fillMounts := append([]corev1.VolumeMount(nil), mounts...)
	ephemeral := int64(64 << 20) // the container's writable layer (none: read-only root) and logs
	mode := in.Spec.Isolation.Workspace
	if mode != runner.WorkspaceNone {
		volumes = append(volumes, corev1.Volume{Name: "workspace", VolumeSource: workspaceVolume(in.WorkspaceDriver, l, &ephemeral)})
		mounts = append(mounts, corev1.VolumeMount{Name: "workspace", MountPath: runner.WorkspaceDir, ReadOnly: mode == runner.WorkspaceReadOnly})
		fillMounts = append(fillMounts, corev1.VolumeMount{Name: "workspace", MountPath: runner.WorkspaceDir})
	}
	res := corev1.ResourceList{
		corev1.ResourceMemory:           *resource.NewQuantity(l.MemoryBytes, resource.BinarySI),
		corev1.ResourceCPU:              *resource.NewMilliQuantity(l.CPUMillis, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(ephemeral, resource.BinarySI),
	}
	req := res
	if p := in.CPURequestPercent; p > 0 && p < 100 {
		req = res.DeepCopy()
		req[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(l.CPUMillis*int64(p)/100, 1), resource.DecimalSI)
	}
	seccomp := in.Seccomp
	agentContainer := func(name string, cmd []string, ports []corev1.ContainerPort, mounts []corev1.VolumeMount) corev1.Container {
		return corev1.Container{
			Name:            name,
			Image:           in.Image,
			ImagePullPolicy: corev1.PullNever,
			Command:         cmd,
			WorkingDir:      "/",
			Ports:           ports,
			Resources:       corev1.ResourceRequirements{Limits: res, Requests: req},
			VolumeMounts:    mounts,
			SecurityContext: &corev1.SecurityContext{
				RunAsUser:                ptr(int64(hostside.AgentUID)),
				RunAsGroup:               ptr(int64(hostside.AgentGID)),
				RunAsNonRoot:             ptr(false),
				Privileged:               ptr(false),
				AllowPrivilegeEscalation: ptr(false),
				ReadOnlyRootFilesystem:   ptr(true),
				ProcMount:                ptr(corev1.DefaultProcMount),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: agentCaps()},
				SeccompProfile:           &seccomp,
			},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: in.Name, Namespace: in.Namespace, Labels: in.Labels, Annotations: in.Annotations},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(0)),
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			HostUsers:                     nil,
			Hostname:                      "sandbox",
			DNSPolicy:                     corev1.DNSNone,
			DNSConfig:                     &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}},
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &seccomp,
			},
			Containers: []corev1.Container{agentContainer(container, cmd, ports, mounts)},
			Volumes:    volumes,
		},
	}
	if mode == runner.WorkspaceReadOnly {
		pod.Spec.InitContainers = []corev1.Container{agentContainer(fillContainer, fillCmd, ports[:1], fillMounts)}
	}
	if in.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = ptr(in.RuntimeClass)
	}
	return pod
}

// workspaceVolume is the workspace's volume: with a workspace driver, its
// CSI inline volume of the limits' disk_bytes and disk_inodes (the
// workspace defaults where zero), its own filesystem outside the node's
// ephemeral storage; without, an emptyDir of disk_bytes, which counts
// toward the pod's ephemeral-storage (adds it to *ephemeral).
func workspaceVolume(driver string, l runner.Limits, ephemeral *int64) corev1.VolumeSource {
	if driver != "" {
		return corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: driver,
			VolumeAttributes: wsvol.Attributes(workspace.Limits{Bytes: l.DiskBytes, Inodes: l.DiskInodes})}}
	}
	ws := corev1.EmptyDirVolumeSource{}
	if l.DiskBytes > 0 {
		ws.SizeLimit = resource.NewQuantity(l.DiskBytes, resource.BinarySI)
		*ephemeral += l.DiskBytes
	}
	return corev1.VolumeSource{EmptyDir: &ws}
}

// buildSecret is a sandbox's Secret: its token and the code's seccomp
// filter.
func buildSecret(name, namespace string, lbl map[string]string, token, filter []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: lbl},
		Type:       corev1.SecretTypeOpaque,
		Immutable:  ptr(true),
		Data:       map[string][]byte{tokenKey: token, filterKey: filter},
	}
}

// buildPolicy is the namespace's NetworkPolicy: every managed pod gets no
// egress at all and ingress only to the agent port, only from sandboxd
// (cidr, or pods labelled sandboxdLabel), and to the reverse egress port
// (port+1) from it too.
func buildPolicy(namespace string, port int, cidr, sandboxdLabel string) (*networkingv1.NetworkPolicy, error) {
	peer := networkingv1.NetworkPolicyPeer{}
	if cidr != "" {
		peer.IPBlock = &networkingv1.IPBlock{CIDR: cidr}
	} else {
		sel, err := labels.ConvertSelectorToLabelsMap(sandboxdLabel)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: SandboxdLabel %q: %w", sandboxdLabel, err)
		}
		peer.PodSelector = &metav1.LabelSelector{MatchLabels: sel}
	}
	tcp := corev1.ProtocolTCP
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName, Namespace: namespace, Labels: map[string]string{hostside.LabelManaged: "true"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{hostside.LabelManaged: "true"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{peer},
				Ports: []networkingv1.NetworkPolicyPort{
					{Protocol: &tcp, Port: ptr(intstr.FromInt32(int32(port)))},
					{Protocol: &tcp, Port: ptr(intstr.FromInt32(int32(port + 1)))}, // reverse egress
				},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{},
		},
	}, nil
}
