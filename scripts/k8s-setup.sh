#!/usr/bin/env bash
# Starts a real single-node Kubernetes for the Kubernetes runner's tests
# (runner/kubernetes: TestConformance, TestClusterReap) and prints the env
# they read. Idempotent and fast when warm: a component whose recorded pid
# is alive is reused, images are re-imported only when they changed.
#
#   binaries  $K8S_CACHE/bin (default /var/cache/sandboxd/k8s/bin):
#             kube-apiserver, kube-controller-manager, kube-scheduler,
#             kubelet (Kubernetes v1.37.2), etcd (v3.7.3), kube-router
#             (v2.1.0) and the CNI plugins bridge, host-local and loopback
#             (v1.10.0), built from the Go module proxy when missing
#             (Kubernetes and etcd through the wrapper modules
#             scripts/k8s/{k8sbuild,etcdbuild}, copied to $K8S_CACHE:
#             `go install pkg@version` refuses k8s.io/kubernetes' replace
#             directives). Cold: 15-30 min on 2 cores; cached: nothing.
#   state     everything under $K8S_STATE (default /var/lib/sandboxd-k8s):
#             pki/ (openssl; admin.kubeconfig is the tests'), etcd/, logs/,
#             run/<component>.pid, containerd/ (its OWN containerd with the
#             CRI plugin, socket containerd/containerd.sock; the host's
#             /run/containerd and dockerd's are never touched), kubelet/
#             (root-dir; seccomp/ holds the runner's Localhost profiles),
#             cni/.
#   node      kubelet on cgroup v1 with the cgroupfs driver, cgroupRoot
#             /sandboxd-k8s, podPidsLimit $K8S_POD_PIDS_LIMIT (default 64:
#             the kubelet's limit is the same for every pod; the runner
#             cannot set one per pod), node IP 10.217.0.1 on the bridge
#             sbxk8s0 (pods 10.217.0.0/24, no default route in pods: the
#             subnet route only), kube-router in firewall-only mode for
#             NetworkPolicy, and the iptables chain SBXK8S-GUARD dropping
#             anything forwarded between the bridge and another interface.
#             The kubelet's root is mounted nosuid,nodev (the workspace
#             emptyDir); runc runs through scripts/k8s/runc-masked.sh,
#             which adds the policy's masked and read-only paths to each
#             container (Kubernetes masks only its own list). The
#             workspace CSI driver workspace.sandboxd (this checkout's
#             runner/kubernetes/cmd/k8s-workspace, on the host as root;
#             its workspaces under $K8S_STATE/workspaces) gives each
#             sandbox's workspace its own filesystem of the job's disk
#             limits (env SANDBOXD_KUBERNETES_WORKSPACE_DRIVER).
#   images    into the CRI containerd's k8s.io namespace, without a
#             registry: docker.io/sandboxd/python:latest (the project's
#             sandboxd/python, scripts/build-images.sh, plus the static
#             sandbox-agent of this checkout at /run/sandboxd-agent/
#             sandbox-agent) and sandboxd.local/pause:1 (static
#             runner/kubernetes/cmd/k8s-pause).
#   cluster   kube-apiserver (RBAC, NodeRestriction) on 127.0.0.1:16443,
#             namespace sandboxd, RuntimeClass gvisor (handler runsc, the
#             runsc-sandboxd wrapper of scripts/containerd-setup.sh through
#             the runc v2 shim) when runsc is installed.
#
# Usage: scripts/k8s-setup.sh [--quiet] [--build-only]   (then: . $K8S_STATE/env)
#        --build-only: only build (or find cached) the binaries; needs Go,
#        not dockerd (scripts/test.sh runs it while the images build).
#        scripts/k8s-down.sh [--purge]    stops it and removes what it made
# Env: K8S_STATE, K8S_CACHE, K8S_POD_PIDS_LIMIT, K8S_WAIT (seconds, default 120).
# Needs dockerd with sandboxd/python:latest (scripts/docker-setup.sh,
# scripts/build-images.sh), Debian's containerd and runc.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
state=${K8S_STATE:-/var/lib/sandboxd-k8s}
cache=${K8S_CACHE:-/var/cache/sandboxd/k8s}
bin=$cache/bin
cni_bin=$cache/cni
pids_limit=${K8S_POD_PIDS_LIMIT:-64}
ws_driver=workspace.sandboxd # wsvol.DefaultDriver
wait_s=${K8S_WAIT:-120}
quiet=""
build_only=""
for a in "$@"; do
	case "$a" in
	--quiet) quiet=1 ;;
	--build-only) build_only=1 ;;
	*) echo "k8s-setup: unknown argument $a" >&2; exit 2 ;;
	esac
done
export PATH="/usr/local/go/bin:$PATH"

k8s_version=v1.37.2
etcd_version=v3.7.3
router_version=v2.1.0
cni_version=v1.10.0
node=sandboxd-node
bridge=sbxk8s0
subnet=10.217.0.0/24
node_ip=10.217.0.1
api=https://127.0.0.1:16443
ns=sandboxd
sock=$state/containerd/containerd.sock
cg=sandboxd-k8s
hierarchies="cpu cpuacct cpuset memory devices freezer blkio pids systemd"

t0=$(date +%s.%N)
say() { echo "k8s-setup: [$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')s] $*"; }

need=()
[ -n "$build_only" ] || for c in openssl:openssl jq:jq curl:curl ipset:ipset iptables:iptables; do
	command -v "${c%%:*}" >/dev/null 2>&1 || need+=("${c#*:}")
done
if [ "${#need[@]}" -gt 0 ]; then
	say "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ -n "$build_only" ] || for b in containerd ctr runc containerd-shim-runc-v2; do
	command -v "$b" >/dev/null || { echo "k8s-setup: $b missing (scripts/docker-setup.sh installs containerd and runc)" >&2; exit 1; }
done

# ---- 1. binaries -----------------------------------------------------------
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37"
wrapper() { # name: the project's wrapper module (scripts/k8s/NAME) copied into the cache, tidied
	local dir=$cache/$1
	if [ ! -f "$dir/go.mod" ] || ! cmp -s "$root/scripts/k8s/$1/go.mod" "$dir/go.mod"; then
		rm -rf "$dir"
		mkdir -p "$dir"
		cp "$root/scripts/k8s/$1"/* "$dir/"
	fi
	(cd "$dir" && go mod tidy)
}
build_k8s() {
	local missing=() b s
	for b in kube-apiserver kube-controller-manager kube-scheduler kubelet; do
		[ -x "$bin/$b" ] || missing+=("$b")
	done
	[ "${#missing[@]}" -eq 0 ] && return 0
	say "building ${missing[*]} $k8s_version (15-30 min cold on 2 cores)"
	wrapper k8sbuild
	for b in "${missing[@]}"; do
		s=$SECONDS
		(cd "$cache/k8sbuild" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "$ldflags" -o "$bin/$b.tmp" "k8s.io/kubernetes/cmd/$b")
		mv "$bin/$b.tmp" "$bin/$b"
		say "built $b in $((SECONDS - s))s"
	done
}
build_etcd() {
	[ -x "$bin/etcd" ] && return 0
	say "building etcd $etcd_version"
	wrapper etcdbuild
	(cd "$cache/etcdbuild" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3)
	mv "$bin/etcd.tmp" "$bin/etcd"
}
install_bin() { # $1 dir, $2 name, $3 package@version
	[ -x "$1/$2" ] && return 0
	say "go install $3"
	mkdir -p "$1"
	(cd / && GOBIN="$1" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install "$3")
}
mkdir -p "$bin"
build_k8s
build_etcd
install_bin "$bin" kube-router "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$router_version"
for p in main/bridge ipam/host-local main/loopback; do
	install_bin "$cni_bin" "${p#*/}" "github.com/containernetworking/plugins/plugins/$p@$cni_version"
done

if [ -n "$build_only" ]; then
	say "binaries ok ($bin, $cni_bin)"
	exit 0
fi

# This checkout's static agent, pause and seccomp writer (seconds when the
# Go build cache is warm).
mkdir -p "$state"/{build,logs,run,pki,etcd,cni/net.d,cni/ipam,containerd,kubelet/seccomp,kubelet/pki,images}
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$state/build/" ./cmd/sandbox-agent ./runner/kubernetes/cmd/k8s-pause ./runner/kubernetes/cmd/k8s-seccomp ./runner/kubernetes/cmd/k8s-workspace)
mkdir -p "$state/bin"
"$state/build/k8s-seccomp" "$state/kubelet/seccomp" "$state/bin/paths.json" >/dev/null
# runc with the policy's masked and read-only paths (scripts/k8s/runc-masked.sh).
sed -e "s#@RUNC@#$(command -v runc)#" -e "s#@PODS@#$state/kubelet/pods/#" "$root/scripts/k8s/runc-masked.sh" >"$state/bin/runc.tmp"
chmod 0755 "$state/bin/runc.tmp"
mv "$state/bin/runc.tmp" "$state/bin/runc"

# ---- 2. PKI (openssl, once) -------------------------------------------------
pki=$state/pki
if [ ! -s "$pki/admin.kubeconfig" ]; then
	say "certificates (openssl)"
	(
		cd "$pki"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=sandboxd-k8s-ca" 2>/dev/null
		printf 'subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.96.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
		printf 'extendedKeyUsage=clientAuth\n' >client.ext
		cert() { # name subject ext
			openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 -extfile "$3" 2>/dev/null
			rm -f "$1.csr"
		}
		cert apiserver "/CN=kube-apiserver" server.ext
		cert admin "/O=system:masters/CN=sandboxd-k8s-admin" client.ext
		cert kubelet "/O=system:nodes/CN=system:node:$node" client.ext
		cert kcm "/CN=system:kube-controller-manager" client.ext
		cert sched "/CN=system:kube-scheduler" client.ext
		cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" client.ext
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		for u in kubelet kcm sched admin; do
			cat >"$u.kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandboxd-k8s
  cluster: {server: "$api", certificate-authority: $pki/ca.crt}
users:
- name: $u
  user: {client-certificate: $pki/$u.crt, client-key: $pki/$u.key}
contexts:
- name: sandboxd-k8s
  context: {cluster: sandboxd-k8s, user: $u}
current-context: sandboxd-k8s
EOF
			mv "$u.kubeconfig.tmp" "$u.kubeconfig"
		done
		chmod 0600 ./*.key
	)
fi
k() { # method path [json]: the apiserver as admin
	curl -sS --max-time 5 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
		-X "$1" -H 'Content-Type: application/json' ${3:+--data "$3"} "$api$2"
}

# ---- 3. node networking, cgroups -------------------------------------------
if ! ip link show "$bridge" >/dev/null 2>&1; then
	ip link add "$bridge" type bridge
fi
ip addr show dev "$bridge" | grep -q "inet $node_ip/" || ip addr add "$node_ip/24" dev "$bridge"
ip link set "$bridge" up
# Pods get no route out (the CNI config gives the subnet route only); the
# guard chain drops whatever would still be forwarded off the bridge.
iptables -N SBXK8S-GUARD 2>/dev/null || true
iptables -C SBXK8S-GUARD -i "$bridge" ! -o "$bridge" -j DROP 2>/dev/null || iptables -A SBXK8S-GUARD -i "$bridge" ! -o "$bridge" -j DROP
iptables -C SBXK8S-GUARD -o "$bridge" ! -i "$bridge" -j DROP 2>/dev/null || iptables -A SBXK8S-GUARD -o "$bridge" ! -i "$bridge" -j DROP
iptables -C FORWARD -j SBXK8S-GUARD 2>/dev/null || iptables -I FORWARD 1 -j SBXK8S-GUARD
modprobe br_netfilter 2>/dev/null || true
[ -w /proc/sys/net/bridge/bridge-nf-call-iptables ] && echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
cat >"$state/cni/net.d/10-sandboxd.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sandboxd-k8s",
  "plugins": [{
    "type": "bridge", "bridge": "$bridge", "isGateway": true, "isDefaultGateway": false,
    "ipMasq": false, "hairpinMode": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "$subnet", "gateway": "$node_ip"}]], "routes": [], "dataDir": "$state/cni/ipam"}
  }]
}
EOF
for h in $hierarchies; do
	[ -d "/sys/fs/cgroup/$h" ] && mkdir -p "/sys/fs/cgroup/$h/$cg"
done
if [ -d /sys/fs/cgroup/cpuset/$cg ]; then
	[ -n "$(cat /sys/fs/cgroup/cpuset/$cg/cpuset.cpus)" ] || cat /sys/fs/cgroup/cpuset/cpuset.cpus >/sys/fs/cgroup/cpuset/$cg/cpuset.cpus
	[ -n "$(cat /sys/fs/cgroup/cpuset/$cg/cpuset.mems)" ] || cat /sys/fs/cgroup/cpuset/cpuset.mems >/sys/fs/cgroup/cpuset/$cg/cpuset.mems
fi

# The kubelet's root holds the pods' emptyDirs (the workspace): nosuid
# and nodev there as the other runners mount it (bind mounts keep the
# flags of the mount they come from).
if ! mountpoint -q "$state/kubelet"; then
	mount --bind "$state/kubelet" "$state/kubelet"
	mount -o remount,bind,nosuid,nodev "$state/kubelet"
fi

# ---- 4. configs -------------------------------------------------------------
runsc_wrapper=/usr/local/bin/runsc-sandboxd # scripts/containerd-setup.sh writes it
runsc_runtime=""
if [ -x "$runsc_wrapper" ]; then
	runsc_runtime=$(
		cat <<EOF
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
        SystemdCgroup = false
        Root = "$state/runsc"
        BinaryName = "$runsc_wrapper"
EOF
	)
fi
cat >"$state/containerd/config.toml" <<EOF
# Written by sandboxd scripts/k8s-setup.sh: the test cluster's own containerd.
version = 2
root = "$state/containerd/root"
state = "$state/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = "$state/containerd/debug.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "$state/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "sandboxd.local/pause:1"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  # root here lacks CAP_SYS_RESOURCE: it cannot lower oom_score_adj
  restrict_oom_score_adj = true
  # pods' network namespaces under $state, not the host's /run/netns
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$state/runc"
        BinaryName = "$state/bin/runc"
$runsc_runtime
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$state/cni/net.d"
EOF
cat >"$state/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: 10350
healthzPort: 10348
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
containerRuntimeEndpoint: unix://$sock
cgroupDriver: cgroupfs
cgroupRoot: /$cg
cgroupsPerQOS: true
failSwapOn: false
failCgroupV1: false
podPidsLimit: $pids_limit
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
clusterDNS: []
resolvConf: ""
staticPodPath: ""
podLogsDir: $state/pod-logs
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "2%"
  imagefs.available: "2%"
serializeImagePulls: false
localStorageCapacityIsolation: true
EOF

# ---- 5. daemons ---------------------------------------------------------------
alive() { # name: its recorded pid runs its binary
	local p
	p=$(cat "$state/run/$1.pid" 2>/dev/null) || return 1
	[ -n "$p" ] && kill -0 "$p" 2>/dev/null && tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "$2"
}
start() { # name binary args...: unless alive, in the background, its own session
	local name=$1
	shift
	alive "$name" "$1" && return 0
	say "start $name (log $state/logs/$name.log)"
	setsid "$@" >>"$state/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$state/run/$name.pid"
}
until_ok() { # what, predicate...: poll every 0.2s up to K8S_WAIT
	local what=$1 i
	shift
	for i in $(seq $((wait_s * 5))); do
		"$@" && return 0
		sleep 0.2
	done
	echo "k8s-setup: $what not ready within ${wait_s}s" >&2
	tail -n 20 "$state"/logs/*.log >&2
	exit 1
}

if alive containerd containerd && ! cmp -s "$state/containerd/config.toml" "$state/run/containerd.toml"; then
	say "warning: containerd's config changed since it started; scripts/k8s-down.sh, then this, applies it"
fi
alive containerd containerd || cp "$state/containerd/config.toml" "$state/run/containerd.toml"
start containerd containerd --config "$state/containerd/config.toml"
start etcd "$bin/etcd" --name sandboxd-k8s --data-dir "$state/etcd" \
	--listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
	--listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
	--initial-cluster sandboxd-k8s=http://127.0.0.1:23800 --listen-metrics-urls http://127.0.0.1:23810 \
	--unsafe-no-fsync --quota-backend-bytes 1073741824
containerd_up() { [ -S "$sock" ] && ctr -a "$sock" --timeout 2s version >/dev/null 2>&1; }
until_ok containerd containerd_up

# Images (import only what changed; the stamp remembers the archive's id).
oci_tar() { # rootfs ref out entrypoint-json: an OCI image-layout tarball of one layer
	local rootfs=$1 ref=$2 out=$3 ep=$4 work ldig lsize cdig csize mdig msize
	work=$(mktemp -d "$state/build/img.XXXX")
	mkdir -p "$work/blobs/sha256"
	tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$rootfs" -cf "$work/layer.tar" .
	ldig=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
	lsize=$(stat -c %s "$work/layer.tar")
	mv "$work/layer.tar" "$work/blobs/sha256/$ldig"
	printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$ep" "$ldig" >"$work/config.json"
	cdig=$(sha256sum "$work/config.json" | cut -d' ' -f1)
	csize=$(stat -c %s "$work/config.json")
	mv "$work/config.json" "$work/blobs/sha256/$cdig"
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' "$cdig" "$csize" "$ldig" "$lsize" >"$work/manifest.json"
	mdig=$(sha256sum "$work/manifest.json" | cut -d' ' -f1)
	msize=$(stat -c %s "$work/manifest.json")
	mv "$work/manifest.json" "$work/blobs/sha256/$mdig"
	printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' "$mdig" "$msize" "$ref" "${ref##*:}" >"$work/index.json"
	echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci-layout"
	tar -C "$work" -cf "$out" oci-layout index.json blobs
	rm -rf "$work"
}
import() { # ref archive id: into k8s.io unless that id is there already
	local ref=$1 archive=$2 id=$3 stamp=$state/images/$(echo "$1" | tr '/:' '__').id
	if [ "$(cat "$stamp" 2>/dev/null)" = "$id" ] &&
		ctr -a "$sock" -n k8s.io images check "name==$ref" 2>/dev/null | grep -q complete; then
		return 0
	fi
	say "import $ref ($archive)"
	ctr -a "$sock" -n k8s.io images import --snapshotter overlayfs "$archive" >/dev/null
	echo "$id" >"$stamp"
}
pause_id=$(sha256sum "$state/build/k8s-pause" | cut -c1-16)
if [ "$(cat "$state/images/sandboxd.local_pause_1.id" 2>/dev/null)" != "$pause_id" ]; then
	rm -rf "$state/build/pause-root"
	mkdir -p "$state/build/pause-root"
	cp "$state/build/k8s-pause" "$state/build/pause-root/pause"
	oci_tar "$state/build/pause-root" sandboxd.local/pause:1 "$state/build/pause.tar" '["/pause"]'
fi
import sandboxd.local/pause:1 "$state/build/pause.tar" "$pause_id"

# sandboxd/python plus this checkout's agent, built by dockerd (classic
# builder) and tagged by the content it depends on; in the background
# while the control plane starts (the tests need it, the node does not).
python_image() {
	if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=$(command -v docker); fi
	local python_id img_hash agent_img ctx
	python_id=$("$DOCKER" image inspect -f '{{.Id}}' sandboxd/python:latest 2>/dev/null) || {
		echo "k8s-setup: docker image sandboxd/python:latest missing (run scripts/build-images.sh)" >&2
		return 1
	}
	img_hash=$( { echo "$python_id v2"; sha256sum <"$state/build/sandbox-agent"; } | sha256sum | cut -c1-12)
	agent_img=sandboxd/python-k8s:$img_hash
	if ! "$DOCKER" image inspect "$agent_img" >/dev/null 2>&1; then
		say "docker build $agent_img (sandboxd/python + the agent)"
		ctx=$state/build/agent-image
		rm -rf "$ctx"
		mkdir -p "$ctx"
		cp "$state/build/sandbox-agent" "$ctx/sandbox-agent"
		# The agent's directory (the token Secret is mounted in it) is
		# root's 0700 as the other runners make it: closed to the code.
		printf 'FROM sandboxd/python:latest\nUSER root\nRUN chown 0:0 /run/sandboxd \\\n && chmod 0700 /run/sandboxd\nCOPY sandbox-agent /run/sandboxd-agent/sandbox-agent\nUSER 65534:65534\n' >"$ctx/Dockerfile"
		DOCKER_BUILDKIT=0 "$DOCKER" build -q -t "$agent_img" "$ctx" >/dev/null
		# Only the newest such tag is kept.
		"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}' sandboxd/python-k8s | grep -vx "$agent_img" | xargs -r "$DOCKER" rmi >/dev/null 2>&1 || true
	fi
	if [ "$(cat "$state/images/docker.io_sandboxd_python_latest.id" 2>/dev/null)" != "$img_hash" ] ||
		! ctr -a "$sock" -n k8s.io images check "name==docker.io/sandboxd/python:latest" 2>/dev/null | grep -q complete; then
		say "docker save $agent_img"
		"$DOCKER" save -o "$state/build/python-k8s.tar" "$agent_img"
		import "docker.io/$agent_img" "$state/build/python-k8s.tar" "$img_hash"
		ctr -a "$sock" -n k8s.io images tag --force "docker.io/$agent_img" docker.io/sandboxd/python:latest >/dev/null
		echo "$img_hash" >"$state/images/docker.io_sandboxd_python_latest.id"
		rm -f "$state/build/python-k8s.tar"
		say "imported docker.io/sandboxd/python:latest"
	fi
}
python_image &
python_image_pid=$!

etcd_up() { curl -s --max-time 2 http://127.0.0.1:23790/health | grep -q '"health":"true"'; }
until_ok etcd etcd_up
start apiserver "$bin/kube-apiserver" --etcd-servers=http://127.0.0.1:23790 --bind-address=127.0.0.1 \
	--advertise-address=127.0.0.1 --secure-port=16443 \
	--tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --client-ca-file="$pki/ca.crt" \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local --service-account-key-file="$pki/sa.pub" \
	--service-account-signing-key-file="$pki/sa.key" --service-cluster-ip-range=10.96.0.0/16 \
	--authorization-mode=Node,RBAC --allow-privileged=false --enable-admission-plugins=NodeRestriction \
	--kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
	--endpoint-reconciler-type=none --kubelet-preferred-address-types=InternalIP
api_up() { [ "$(k GET /readyz 2>/dev/null)" = ok ]; }
until_ok apiserver api_up
say "apiserver ready"
start kcm "$bin/kube-controller-manager" --kubeconfig="$pki/kcm.kubeconfig" \
	--authentication-kubeconfig="$pki/kcm.kubeconfig" --authorization-kubeconfig="$pki/kcm.kubeconfig" \
	--bind-address=127.0.0.1 --secure-port=10357 --use-service-account-credentials=true \
	--service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
	--cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" --leader-elect=false \
	--controllers='*,-nodeipam'
start sched "$bin/kube-scheduler" --kubeconfig="$pki/sched.kubeconfig" --authentication-kubeconfig="$pki/sched.kubeconfig" \
	--authorization-kubeconfig="$pki/sched.kubeconfig" --bind-address=127.0.0.1 --secure-port=10359 --leader-elect=false
start kubelet "$bin/kubelet" --config="$state/kubelet/config.yaml" --kubeconfig="$pki/kubelet.kubeconfig" \
	--root-dir="$state/kubelet" --cert-dir="$state/kubelet/pki" --hostname-override="$node" --node-ip="$node_ip"
# The workspace CSI driver's node plugin, on the host as root (what
# deploy/kubernetes/workspace-csi/ runs as a privileged DaemonSet; this
# apiserver admits no privileged pod). Run from a copy, so that a rebuild
# never writes a running binary; a changed build restarts it.
ws_bin=$state/bin/k8s-workspace
if ! cmp -s "$state/build/k8s-workspace" "$ws_bin"; then
	if alive workspace-csi "$ws_bin"; then
		p=$(cat "$state/run/workspace-csi.pid")
		kill "$p"
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		say "restarting workspace-csi (a new build)"
	fi
	cp "$state/build/k8s-workspace" "$ws_bin.tmp"
	mv "$ws_bin.tmp" "$ws_bin"
fi
start workspace-csi "$ws_bin" --root="$state/workspaces" --kubelet-dir="$state/kubelet" --node-id="$node" --name="$ws_driver"
node_ready() {
	k GET "/api/v1/nodes/$node" 2>/dev/null | jq -e '(.status.conditions // [] | any(.type == "Ready" and .status == "True")) and ((.spec.taints // []) | length == 0)' >/dev/null 2>&1
}
until_ok "node $node" node_ready
say "node $node Ready"
# NetworkPolicy (after the Node object exists).
start kube-router "$bin/kube-router" --kubeconfig="$pki/admin.kubeconfig" --run-firewall=true --run-router=false \
	--run-service-proxy=false --enable-cni=false --enable-pod-egress=false --hostname-override="$node" \
	--health-port=20345 --service-cluster-ip-range=10.96.0.0/16
router_up() { curl -s --max-time 2 http://127.0.0.1:20345/healthz >/dev/null 2>&1; }
until_ok kube-router router_up

wait "$python_image_pid" || { echo "k8s-setup: the sandbox image failed" >&2; exit 1; }

# ---- 6. namespace, RuntimeClass, env ----------------------------------------
create() { # path json: POST unless it exists
	local out
	out=$(k POST "$1" "$2")
	if ! jq -e '.metadata.name or .reason == "AlreadyExists"' <<<"$out" >/dev/null 2>&1; then
		echo "k8s-setup: POST $1: $out" >&2
		exit 1
	fi
}
create /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$ns\"}}"
# The workspace driver's CSIDriver (as in deploy/kubernetes/workspace-csi/),
# then the kubelet's registration of the plugin (its CSINode lists it).
create /apis/storage.k8s.io/v1/csidrivers "{\"apiVersion\":\"storage.k8s.io/v1\",\"kind\":\"CSIDriver\",\"metadata\":{\"name\":\"$ws_driver\"},\"spec\":{\"attachRequired\":false,\"podInfoOnMount\":true,\"fsGroupPolicy\":\"None\",\"volumeLifecycleModes\":[\"Ephemeral\"]}}"
ws_registered() { k GET "/apis/storage.k8s.io/v1/csinodes/$node" 2>/dev/null | jq -e --arg d "$ws_driver" '.spec.drivers // [] | any(.name == $d)' >/dev/null 2>&1; }
until_ok "workspace driver $ws_driver" ws_registered
runtime_class=""
if [ -n "$runsc_runtime" ]; then
	create /apis/node.k8s.io/v1/runtimeclasses '{"apiVersion":"node.k8s.io/v1","kind":"RuntimeClass","metadata":{"name":"gvisor"},"handler":"runsc"}'
	runtime_class=gvisor
fi
cat >"$state/env.tmp" <<EOF
export SANDBOXD_KUBECONFIG=$pki/admin.kubeconfig
export SANDBOXD_REQUIRE_KUBERNETES=1
export SANDBOXD_KUBERNETES_NAMESPACE=$ns
export SANDBOXD_KUBERNETES_IMAGE=sandboxd/python:latest
export SANDBOXD_KUBERNETES_SANDBOXD_CIDR=$node_ip/32
export SANDBOXD_KUBERNETES_WORKSPACE_DRIVER=$ws_driver
EOF
if [ -n "$runtime_class" ]; then
	cat >>"$state/env.tmp" <<EOF
# gVisor (RuntimeClass $runtime_class, handler runsc): NOT working yet on this node: under the
# runc v2 shim a pod's app container is reported Running but never runs; do not set
# SANDBOXD_KUBERNETES_RUNTIME_CLASS=$runtime_class for the tests until it does.
EOF
fi
mv "$state/env.tmp" "$state/env"
say "ok: Kubernetes $k8s_version node $node ($state); env in $state/env:"
[ -n "$quiet" ] || cat "$state/env"
