#!/usr/bin/env bash
# The Kubernetes runner's control plane at scale, simulated (issue 15): a
# throwaway cluster of fake nodes (kwok) and runner/kubernetes'
# BenchmarkKwok against it. On demand only: not part of .ci/run or
# scripts/test.sh.
#
# kwok pods run no agent: the benchmark measures what the runner does up to
# the agent dial (Secret and Pod create, the scheduler's binding, kwok
# marking the pod Running with an IP, the runner's watch seeing it; then
# the delete), not the dial, the agent's start or any Exec.
#
# What it starts, all on loopback, in a temp state dir (removed at the end)
# with its own certificates (openssl), on ports apart from
# scripts/k8s-setup.sh's test cluster (whose processes it never touches):
#   etcd            127.0.0.1:24790 (peer 24800, metrics 24810), --unsafe-no-fsync
#   kube-apiserver  127.0.0.1:17443 (RBAC; defaults otherwise: priority and
#                   fairness on, 400/200 in-flight)
#   kube-scheduler  127.0.0.1:24759 (client QPS 500, burst 1000: the default
#                   50/100 would cap binding at 50 pods/s)
#   kwok v0.8.0     127.0.0.1:24795, managing only nodes annotated
#                   kwok.x-k8s.io/node=fake, with kwok's own "fast" stages
#                   (pod ready at once, no delay) read from its module
# No kube-controller-manager: nothing here needs it (no node lifecycle
# controller, which would lift the not-ready taint that the admission plugin
# TaintNodesByCondition puts on a new node: that plugin is off; and so no
# node leases: kwok runs with
# --node-lease-duration-seconds=0, and its node status heartbeat is every
# 600-1210 s per node, ~1.7 writes/s for 1,000 nodes, so kwok's own load
# does not dominate). The runner authenticates as a service account would
# (group system:serviceaccounts, so priority and fairness puts it in
# workload-low as an in-cluster sandboxd), bound to cluster-admin.
#
# The benchmark creates the nodes (32 CPUs, 256 GiB, 110 pods each, no
# taints), the namespace sandboxd-kwok and its default ServiceAccount, then
# measures (runner/kubernetes/kwok_bench_test.go): sequential and concurrent
# create -> running -> delete, a burst against the job service's warm pool,
# and the apiserver's requests and watches.
#
# Usage: scripts/kwok-bench.sh [--smoke] [--keep]
#   --smoke  10 nodes, 20 pods per phase, a burst of 20 (under 2 min warm)
#   --keep   leave the state dir (logs) in place
# Env: K8S_CACHE (binaries in $K8S_CACHE/bin, default
# /var/cache/sandboxd/k8s: scripts/k8s-setup.sh --build-only builds etcd,
# kube-apiserver and kube-scheduler; kwok is built here when missing),
# KWOK_NODES, KWOK_PODS, KWOK_SEQ, KWOK_CONCURRENCY, KWOK_BURST,
# KWOK_POOL_SIZE, KWOK_POOL_MAX_READY (default the burst), KWOK_WORKERS
# override the sizes; KWOK_OUT (default
# $state/bench.txt, copied to /tmp/kwok-bench-<time>.txt) gets go test's output.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${K8S_CACHE:-/var/cache/sandboxd/k8s}
bin=$cache/bin
kwok_version=v0.8.0
smoke=""
keep=""
for a in "$@"; do
	case "$a" in
	--smoke) smoke=1 ;;
	--keep) keep=1 ;;
	*) echo "kwok-bench: unknown argument $a" >&2; exit 2 ;;
	esac
done
export PATH="/usr/local/go/bin:$PATH"
if [ -n "$smoke" ]; then
	nodes=${KWOK_NODES:-10} pods=${KWOK_PODS:-20} seq=${KWOK_SEQ:-10} conc=${KWOK_CONCURRENCY:-5}
	burst=${KWOK_BURST:-20} pool_size=${KWOK_POOL_SIZE:-5} workers=${KWOK_WORKERS:-10}
else
	nodes=${KWOK_NODES:-1000} pods=${KWOK_PODS:-1000} seq=${KWOK_SEQ:-200} conc=${KWOK_CONCURRENCY:-50}
	burst=${KWOK_BURST:-1000} pool_size=${KWOK_POOL_SIZE:-100} workers=${KWOK_WORKERS:-100}
fi
max_ready=${KWOK_POOL_MAX_READY:-$burst}
etcd_port=24790 etcd_peer=24800 etcd_metrics=24810 api_port=17443 sched_port=24759 kwok_port=24795

t0=$(date +%s.%N)
say() { echo "kwok-bench: [$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')s] $*"; }

for b in etcd kube-apiserver kube-scheduler; do
	[ -x "$bin/$b" ] || { echo "kwok-bench: $bin/$b missing (scripts/k8s-setup.sh --build-only builds it)" >&2; exit 1; }
done
command -v openssl >/dev/null || { echo "kwok-bench: openssl missing" >&2; exit 1; }
if [ ! -x "$bin/kwok" ]; then
	say "go install sigs.k8s.io/kwok/cmd/kwok@$kwok_version"
	(cd / && GOBIN="$bin" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install "sigs.k8s.io/kwok/cmd/kwok@$kwok_version")
fi
# kwok's stages ship in its module (kustomize/stage): the same as kwokctl's
# defaults, with the lease-less heartbeat's long delay.
kwok_mod=$(cd / && go mod download -json "sigs.k8s.io/kwok@$kwok_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$kwok_mod/kustomize/stage" ] || { echo "kwok-bench: kwok's module not found ($kwok_mod)" >&2; exit 1; }

for p in $etcd_port $etcd_peer $etcd_metrics $api_port $sched_port $kwok_port; do
	if ss -Hltn "sport = :$p" | grep -q .; then
		echo "kwok-bench: port $p is in use (another kwok-bench running?)" >&2
		exit 1
	fi
done

state=$(mktemp -d /tmp/sandboxd-kwok.XXXXXX)
mkdir -p "$state/pki" "$state/logs" "$state/etcd"
pids=()
cleanup() { # kwok and the scheduler first, etcd last; only the pids this started
	local p i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		p=${pids[$i]}
		kill "$p" 2>/dev/null || continue
		for _ in $(seq 50); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.2
		done
		kill -9 "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if [ -n "$keep" ]; then
		echo "kwok-bench: state kept in $state"
	else
		rm -rf "$state"
	fi
}
trap cleanup EXIT
start() { # name binary args...: in the background, its own session; pid recorded
	local name=$1
	shift
	setsid "$@" >"$state/logs/$name.log" 2>&1 </dev/null &
	pids+=($!)
	echo "$name:$!" >>"$state/pids"
}
until_ok() { # what seconds predicate...
	local what=$1 n=$2 i
	shift 2
	for i in $(seq $((n * 5))); do
		"$@" && return 0
		sleep 0.2
	done
	echo "kwok-bench: $what not ready within ${n}s" >&2
	tail -n 30 "$state"/logs/*.log >&2
	exit 1
}

say "certificates ($state/pki)"
api=https://127.0.0.1:$api_port
(
	cd "$state/pki"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=sandboxd-kwok-ca" 2>/dev/null
	printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
	printf 'extendedKeyUsage=clientAuth\n' >client.ext
	cert() { # name subject ext
		openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
		openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 2 -extfile "$3" 2>/dev/null
		rm -f "$1.csr"
	}
	cert apiserver "/CN=kube-apiserver" server.ext
	cert admin "/O=system:masters/CN=kwok-bench-admin" client.ext
	cert sched "/CN=system:kube-scheduler" client.ext
	cert kwok "/O=system:masters/CN=kwok-controller" client.ext
	cert sandboxd "/O=system:serviceaccounts/O=system:serviceaccounts:sandboxd-kwok/CN=system:serviceaccount:sandboxd-kwok:sandboxd" client.ext
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	for u in admin sched kwok sandboxd; do
		cat >"$u.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kwok
  cluster: {server: "$api", certificate-authority: $state/pki/ca.crt}
users:
- name: $u
  user: {client-certificate: $state/pki/$u.crt, client-key: $state/pki/$u.key}
contexts:
- name: kwok
  context: {cluster: kwok, user: $u}
current-context: kwok
EOF
	done
	chmod 0600 ./*.key
)
pki=$state/pki
k() { # method path [json]: the apiserver as admin
	curl -sS --max-time 10 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
		-X "$1" -H 'Content-Type: application/json' ${3:+--data "$3"} "$api$2"
}

say "etcd, kube-apiserver"
start etcd "$bin/etcd" --name kwok-bench --data-dir "$state/etcd" \
	--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
	--listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
	--initial-cluster "kwok-bench=http://127.0.0.1:$etcd_peer" --listen-metrics-urls "http://127.0.0.1:$etcd_metrics" \
	--unsafe-no-fsync --quota-backend-bytes 4294967296
etcd_up() { curl -s --max-time 2 "http://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"'; }
until_ok etcd 60 etcd_up
start apiserver "$bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" --bind-address=127.0.0.1 \
	--advertise-address=127.0.0.1 --secure-port="$api_port" \
	--tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --client-ca-file="$pki/ca.crt" \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local --service-account-key-file="$pki/sa.pub" \
	--service-account-signing-key-file="$pki/sa.key" --service-cluster-ip-range=10.97.0.0/16 \
	--authorization-mode=RBAC --allow-privileged=false --endpoint-reconciler-type=none \
	--disable-admission-plugins=TaintNodesByCondition
api_up() { [ "$(k GET /readyz 2>/dev/null)" = ok ]; }
until_ok kube-apiserver 120 api_up
out=$(k POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"sandboxd-kwok"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"system:serviceaccount:sandboxd-kwok:sandboxd"}]}')
grep -q '"name": "sandboxd-kwok"' <<<"$out" || { echo "kwok-bench: clusterrolebinding: $out" >&2; exit 1; }

say "kube-scheduler, kwok"
cat >"$state/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $pki/sched.kubeconfig, qps: 500, burst: 1000}
leaderElection: {leaderElect: false}
EOF
start scheduler "$bin/kube-scheduler" --config="$state/scheduler.yaml" --authentication-kubeconfig="$pki/sched.kubeconfig" \
	--authorization-kubeconfig="$pki/sched.kubeconfig" --bind-address=127.0.0.1 --secure-port="$sched_port"
stage=$kwok_mod/kustomize/stage
{
	cat "$stage/node/fast/node-initialize.yaml"
	echo ---
	cat "$stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"
	for s in pod-ready pod-complete pod-delete; do
		echo ---
		cat "$stage/pod/fast/$s.yaml"
	done
} >"$state/kwok.yaml"
start kwok "$bin/kwok" --kubeconfig="$pki/kwok.kubeconfig" --config="$state/kwok.yaml" \
	--manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
	--node-lease-duration-seconds=0 --cidr=10.240.0.1/16 --node-ip=10.239.0.1 \
	--server-address="127.0.0.1:$kwok_port"
sched_up() { curl -sk --max-time 2 "https://127.0.0.1:$sched_port/healthz" | grep -q ok; }
until_ok kube-scheduler 60 sched_up
kwok_up() { curl -s --max-time 2 "http://127.0.0.1:$kwok_port/healthz" | grep -q ok; }
until_ok kwok 60 kwok_up
say "cluster up: $(tr '\n' ' ' <"$state/pids")"

out_file=${KWOK_OUT:-$state/bench.txt}
say "go test -bench BenchmarkKwok: $nodes nodes, $seq sequential, $pods at $conc concurrent, burst $burst (pool $pool_size up to $max_ready, $workers workers); load: $(cut -d' ' -f1-3 /proc/loadavg)"
set +e
(
	cd "$root"
	SANDBOXD_KWOK_KUBECONFIG="$pki/sandboxd.kubeconfig" SANDBOXD_KWOK_ADMIN_KUBECONFIG="$pki/admin.kubeconfig" \
		SANDBOXD_KWOK_NODES=$nodes SANDBOXD_KWOK_PODS=$pods SANDBOXD_KWOK_SEQ=$seq SANDBOXD_KWOK_CONCURRENCY=$conc \
		SANDBOXD_KWOK_BURST=$burst SANDBOXD_KWOK_POOL_SIZE=$pool_size SANDBOXD_KWOK_POOL_MAX_READY=$max_ready SANDBOXD_KWOK_WORKERS=$workers \
		SANDBOXD_KWOK_PIDS="$(tr '\n' ' ' <"$state/pids")" \
		go test ./runner/kubernetes -run '^$' -bench '^BenchmarkKwok$' -benchtime=1x -count=1 -timeout 60m -v
) 2>&1 | tee "$out_file"
rc=${PIPESTATUS[0]}
set -e
say "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -z "${KWOK_OUT:-}" ]; then
	cp "$out_file" "/tmp/kwok-bench-$(date +%Y%m%dT%H%M%S).txt"
	echo "kwok-bench: output copied to /tmp/kwok-bench-*.txt"
fi
for c in etcd apiserver scheduler kwok; do
	p=$(sed -n "s/^$c://p" "$state/pids")
	kill -0 "$p" 2>/dev/null || { echo "kwok-bench: $c (pid $p) died during the run" >&2; tail -n 20 "$state/logs/$c.log" >&2; rc=1; }
done
exit "$rc"
