// Package config is sandboxd's configuration in one place: every key of the
// YAML file with its type, default, ceiling, environment variable, serve
// flag and documentation. The loader (cmd/sandboxd), the job service and
// the API take their sections from here (job.Config.Sessions is a
// config.Sessions, not a copy of its fields), and the README's
// configuration table is Markdown(), checked verbatim by a test.
//
// # Adding a key
//
// A key is one field of a section struct in this file, and nothing else:
//
//  1. Add the field with its tags: yaml:"name" (the key), doc:"..." (what it
//     does, the README's text) and, as needed, env:"SANDBOXD_NAME",
//     flag:"name" (a serve flag), check:"positive", "nonnegative",
//     "abspath", "required", "hostport", "secret" (empty, or at least 32
//     bytes; never shown) or "oneof=a b c" (comma-separated),
//     and default:"text" when the default is not a plain value (computed
//     at start, or the runner's own).
//  2. Set its default in Defaults() below; zero means none or off, and the
//     doc says so. A new resource limit is a field of runner.Limits (tags
//     there) with its built-in default and ceiling in limits.go.
//  3. A rule across keys goes into (*Config).validate (validate.go).
//  4. `go test ./config` prints the new README table if it changed; paste it.
//
// Consumers read the typed field (cfg.Sessions.MaxTTL). A section the job
// service or the API takes whole needs no wiring; a new section is passed
// whole too. Environment variables, flags, strict decoding with the closest
// valid key for a typo, checks and docs all follow from the tags.
package config

import (
	"time"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools/builtin"
)

// DefaultTenant serves every request when no API keys are configured, and
// owns the keys of SANDBOXD_API_KEYS given without ":TENANT".
const DefaultTenant = "default"

// Config is the daemon's configuration. Precedence: flags > environment >
// YAML file > Defaults().
type Config struct {
	Addr        string `yaml:"addr" env:"SANDBOXD_ADDR" flag:"addr" check:"hostport" doc:"the API's listen address (HOST:PORT)"`
	MetricsAddr string `yaml:"metrics_addr" env:"SANDBOXD_METRICS_ADDR" flag:"metrics-addr" check:"hostport" doc:"the Prometheus /metrics listener, without authentication: keep it on loopback or a private network (HOST:PORT; port 0 picks a free one, logged)"`
	DataDir     string `yaml:"data_dir" env:"SANDBOXD_DATA_DIR" flag:"data-dir" check:"required,abspath" default:"/var/lib/sandboxd as root, else $XDG_DATA_HOME/sandboxd or ~/.local/share/sandboxd" doc:"one sandboxd at a time (sandboxd.lock: a second serve on it exits at once naming the holder's pid); holds sandboxd.db (SQLite: jobs, their events and artifacts, sessions, approvals), run/, docker/ or containerd/ (sandbox state; the container runners' socket paths under it must fit 108 bytes, or serve refuses to start) and workspaces/ (at start, every workspace no live job or session owns is removed)"`
	Store       string `yaml:"store" env:"SANDBOXD_STORE" flag:"store" check:"store" default:"sqlite: data_dir/sandboxd.db" doc:"where jobs, sessions, approvals, events and artifacts are kept: sqlite (one replica, embedded) or a postgres://USER:PASSWORD@HOST:PORT/DB URL (pgx parameters such as pool_max_conns apply), the store several replicas share (README: Running several replicas); the schema is migrated at start, and a database migrated by a newer sandboxd is refused; its password is never logged"`
	// ReplicaID and ReplicaAddress name this process among the replicas
	// sharing a Postgres store (unused with SQLite).
	ReplicaID      string `yaml:"replica_id" env:"SANDBOXD_REPLICA_ID" flag:"replica-id" default:"the host name and the API port" doc:"with a postgres store: this replica's identity, stable across its restarts (a restarted replica takes its previous process's jobs and sessions over at once; its sandboxes carry it in their labels, so a live replica reaps them when its lease expires); two live processes must never share one"`
	ReplicaAddress string `yaml:"replica_address" env:"SANDBOXD_REPLICA_ADDRESS" flag:"replica-address" default:"the API address" doc:"with a postgres store: the HOST:PORT other replicas reach this one at (forwarded session requests)"`
	// ReplicaSecret authenticates the requests replicas forward to each
	// other (api/forward.go).
	ReplicaSecret string        `yaml:"replica_secret" env:"SANDBOXD_REPLICA_SECRET" check:"secret" default:"none: requests for another replica's session, job or MCP session are not forwarded" doc:"with a postgres store: the key (at least 32 bytes, the same on every replica) of the HMAC-SHA256 that a request forwarded to the replica holding its session, job or MCP session carries, with the caller's tenant, a timestamp and a nonce; the receiving replica refuses a forged, altered, replayed or stale (30 s) one"`
	ReplicaLease  time.Duration `yaml:"replica_lease" env:"SANDBOXD_REPLICA_LEASE" flag:"replica-lease" default:"15s" doc:"with a postgres store: how long this replica's lease lasts unrenewed (renewed every third of it): how soon another replica takes a dead one's jobs, sessions and sandboxes over, and how long a database outage a replica survives before it stops serving"`
	LogLevel      string        `yaml:"log_level" env:"SANDBOXD_LOG_LEVEL" flag:"log-level" check:"oneof=debug info warn error" doc:"debug, info, warn or error; text to stderr (a line per HTTP request at debug; refused requests at info, server errors at warn)"`
	// ShutdownTimeout bounds the graceful shutdown: in-flight requests and
	// running jobs get this long before they are cancelled.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" check:"positive" doc:"running jobs get this long on SIGTERM, then fail with reason shutdown; queued jobs stay queued and run at the next start"`
	Runner          Runner        `yaml:"runner"`
	Limits          Limits        `yaml:"limits" default:"the built-in values below" doc:"a job's and a session's resource limits. A request (its limits, or a tool's timeout_seconds) may ask for any value up to the ceiling; what it leaves out takes the default; a value above the ceiling is refused with 400 naming the ceiling"`
	Queue           Queue         `yaml:"queue"`
	API             API           `yaml:"api"`
	Tenants         Tenants       `yaml:"tenants" env:"SANDBOXD_API_KEYS" default:"none: one tenant default, no authentication, and sandboxd refuses to listen on a non-loopback address" doc:"the tenants and their API keys; SANDBOXD_API_KEYS=KEY:TENANT,... replaces them (a key without :TENANT belongs to default)"`
	// OperatorKeys authenticate the operator: the dashboard data of every
	// tenant and the approvals of every tenant.
	OperatorKeys []string    `yaml:"operator_keys" env:"SANDBOXD_OPERATOR_KEYS" doc:"API keys of the operator (comma-separated in the environment): GET /v1/dashboard shows every tenant, and any tenant's approvals may be listed and decided; they run no jobs"`
	HTTPRequest  HTTPRequest `yaml:"http_request"`
	Sessions     Sessions    `yaml:"sessions"`
	Pool         Pool        `yaml:"pool"`
	Retention    Retention   `yaml:"retention"`
	Callbacks    Callbacks   `yaml:"callbacks"`
	Console      Console     `yaml:"console"`
	Labels       Labels      `yaml:"labels"`
	// ToolsDir, Tools, Turns and Providers: model turns (POST
	// /v1/tool-calls), tools without Go code and MCP tool providers
	// (turns.go).
	ToolsDir  string    `yaml:"tools_dir" env:"SANDBOXD_TOOLS_DIR" check:"abspath" default:"none" doc:"a directory of tool files (*.yaml and *.yml argv or script tools, *.py function tools), loaded at start, on SIGHUP and on POST /v1/admin/tools/reload (operator keys); each file on its own: a bad one is logged and listed in GET /v1/tools, the others load"`
	Tools     Tools     `yaml:"tools"`
	Turns     Turns     `yaml:"turns"`
	Hooks     Hooks     `yaml:"hooks" default:"none" doc:"HTTP hooks around tool calls, per tenant and tool glob: before (allow, deny with a reason, or rewritten arguments) and after (redact the result); signed like callbacks, with a timeout and fail_open, recorded on the job's hooks, dialled through the same address checks as egress"`
	Providers Providers `yaml:"providers" default:"none" doc:"MCP servers whose tools join the registry as <name>__<tool>: a stdio command in a sandbox or a streamable-HTTP url; started lazily or at boot, restarted with backoff when they die"`
}

// Runner selects and configures the sandbox backend.
type Runner struct {
	Name       string           `yaml:"name" env:"SANDBOXD_RUNNER" flag:"runner" check:"oneof=local docker containerd kubernetes" doc:"the sandbox backend: local, docker, containerd or kubernetes"`
	Local      LocalRunner      `yaml:"local"`
	Docker     DockerRunner     `yaml:"docker"`
	Containerd ContainerdRunner `yaml:"containerd"`
	Kubernetes KubernetesRunner `yaml:"kubernetes"`
}

// LocalRunner configures the local (namespaces + cgroups) runner.
type LocalRunner struct {
	Rootfs       string `yaml:"rootfs" env:"SANDBOXD_ROOTFS" check:"abspath" default:"empty: a read-only view of the host's /usr /bin /sbin /lib* /etc" doc:"an unpacked image bound read-only as the sandbox root (it needs /proc, /dev, /tmp and /run)"`
	AllowWeak    bool   `yaml:"allow_weak" env:"SANDBOXD_ALLOW_WEAK" doc:"run sandboxes even where this host lacks an isolation feature but namespaces (cgroups, seccomp; logged on every sandbox); off, such sandboxes are refused"`
	AgentPath    string `yaml:"agent_path" env:"SANDBOXD_AGENT_PATH" check:"abspath" default:"sandbox-agent next to sandboxd or on PATH" doc:"the static sandbox-agent binary, every sandbox's pid 1"`
	LauncherPath string `yaml:"launcher_path" env:"SANDBOXD_LAUNCHER_PATH" check:"abspath" default:"sandbox-launch next to sandboxd or on PATH" doc:"the static sandbox-launch binary that builds each sandbox's isolation and starts the agent in it"`
}

// DockerRunner configures the Docker runner (runner.name: docker).
type DockerRunner struct {
	AgentPath string `yaml:"agent_path" env:"SANDBOXD_AGENT_PATH" check:"abspath" default:"sandbox-agent next to sandboxd or on PATH" doc:"the static sandbox-agent binary mounted into every sandbox"`
	Image     string `yaml:"image" default:"sandboxd/python:latest" doc:"the sandbox image of a session or job that names none"`
	Host      string `yaml:"host" default:"DOCKER_HOST, else the local socket" doc:"the Docker daemon's address"`
	Runtime   string `yaml:"runtime" default:"the daemon's default runtime" doc:"the OCI runtime (runsc: gVisor); also --runtime"`
}

// ContainerdRunner configures the containerd runner (runner.name:
// containerd); scripts/containerd-setup.sh starts the daemon and imports
// the images.
type ContainerdRunner struct {
	Address   string `yaml:"address" env:"SANDBOXD_CONTAINERD_ADDRESS" default:"/run/containerd/containerd.sock" doc:"containerd's socket"`
	Namespace string `yaml:"namespace" env:"SANDBOXD_CONTAINERD_NAMESPACE" default:"sandboxd" doc:"the containerd namespace of the sandboxes and images"`
	Image     string `yaml:"image" env:"SANDBOXD_CONTAINERD_IMAGE" default:"sandboxd/python:latest" doc:"the sandbox image, imported into the namespace"`
	AgentPath string `yaml:"agent_path" env:"SANDBOXD_AGENT_PATH" check:"abspath" default:"sandbox-agent next to sandboxd or on PATH" doc:"the static sandbox-agent binary mounted into every sandbox"`
	Runtime   string `yaml:"runtime" env:"SANDBOXD_CONTAINERD_RUNTIME" default:"runc" doc:"runc, runsc (gVisor) or a containerd shim name; also --runtime"`
}

// KubernetesRunner configures the Kubernetes runner (runner.name:
// kubernetes): every sandbox a Pod (runner/kubernetes).
type KubernetesRunner struct {
	Kubeconfig        string `yaml:"kubeconfig" env:"SANDBOXD_KUBECONFIG" check:"abspath" default:"empty: in-cluster credentials (sandboxd's service account)" doc:"the kubeconfig file of the cluster"`
	Namespace         string `yaml:"namespace" env:"SANDBOXD_KUBERNETES_NAMESPACE" default:"sandboxd" doc:"the namespace of the sandbox pods, their secrets and the NetworkPolicy"`
	Image             string `yaml:"image" env:"SANDBOXD_KUBERNETES_IMAGE" default:"sandboxd/python:latest" doc:"the sandbox image (with the agent at /run/sandboxd-agent/sandbox-agent), present on the nodes (never pulled)"`
	RuntimeClass      string `yaml:"runtime_class" env:"SANDBOXD_KUBERNETES_RUNTIME_CLASS" default:"empty: the node's default (runc)" doc:"the pods' RuntimeClass (gvisor: runsc)"`
	SeccompFallback   bool   `yaml:"seccomp_fallback" env:"SANDBOXD_KUBERNETES_SECCOMP_FALLBACK" doc:"run pods with the runtime's default seccomp profile instead of the policy's Localhost ones (weaker; a warning at start), for nodes without the installed profiles"`
	SandboxdCIDR      string `yaml:"sandboxd_cidr" env:"SANDBOXD_KUBERNETES_SANDBOXD_CIDR" default:"empty: sandboxd's own pods (app.kubernetes.io/name=sandboxd)" doc:"where sandboxd dials the agents from when it runs outside the cluster (the NetworkPolicy admits only it to the agent port)"`
	WorkspaceDriver   string `yaml:"workspace_driver" env:"SANDBOXD_KUBERNETES_WORKSPACE_DRIVER" default:"empty: an emptyDir with a sizeLimit (enforced only by the kubelet's eviction, no inode limit)" doc:"the CSI driver of the workspace volumes (k8s-workspace, deploy/kubernetes/workspace-csi/; workspace.sandboxd): each workspace its own filesystem of the job's disk_bytes and disk_inodes, ENOSPC inside the pod when full"`
	CPURequestPercent int    `yaml:"cpu_request_percent" env:"SANDBOXD_KUBERNETES_CPU_REQUEST_PERCENT" check:"percent" default:"0: 100, the whole limit (Guaranteed QoS)" doc:"the share of a sandbox's CPU limit its pod requests from the scheduler (1-100): lower packs more sandboxes on a node (Burstable QoS), each still capped at its limit; memory is always requested whole"`
	// PodName, PodNamespace and PodUID name the pod sandboxd runs in
	// (kubernetes.Config.OwnerPod), from the downward API.
	PodName      string `yaml:"pod_name" env:"SANDBOXD_POD_NAME" default:"empty: sandboxd runs outside the cluster" doc:"the pod sandboxd runs in (the downward API's metadata.name; pod_name, pod_namespace and pod_uid are set together or not at all): every sandbox pod and secret records it, and another sandboxd reaps them only once that pod is gone, terminated or of another uid, not by its process, which no other pod's pid namespace shows (several replicas in the cluster need it)"`
	PodNamespace string `yaml:"pod_namespace" env:"SANDBOXD_POD_NAMESPACE" default:"empty: sandboxd runs outside the cluster" doc:"the namespace of sandboxd's pod (metadata.namespace; see pod_name); one other than namespace needs get on pods there for sandboxd's service account"`
	PodUID       string `yaml:"pod_uid" env:"SANDBOXD_POD_UID" default:"empty: sandboxd runs outside the cluster" doc:"the uid of sandboxd's pod (metadata.uid; see pod_name): a pod made anew under the same name is another owner"`
}

// Queue sizes admission.
type Queue struct {
	Size    int `yaml:"size" env:"SANDBOXD_QUEUE_SIZE" check:"positive" doc:"jobs accepted and waiting for a worker; past it a submit answers 429 with Retry-After"`
	Workers int `yaml:"workers" env:"SANDBOXD_WORKERS" check:"positive" doc:"jobs running at once"`
	// TenantMaxRunning caps the jobs one tenant runs at once (a tenant's
	// own tenants[].max_running wins); 0: DefaultTenantMaxRunning.
	TenantMaxRunning int `yaml:"tenant_max_running" env:"SANDBOXD_TENANT_MAX_RUNNING" check:"nonnegative" default:"0: three quarters of the workers (at least 1) when two or more tenants are configured, else all of them" doc:"jobs one tenant runs at once, so that another tenant's job finds a worker; queued jobs start in a fair order across tenants by their weight (tenants[].weight), first come first served within a tenant"`
}

// TenantCap is the running cap of a tenant without its own max_running,
// given how many tenants are configured.
func (q Queue) TenantCap(tenants int) int {
	if q.TenantMaxRunning > 0 {
		return min(q.TenantMaxRunning, q.Workers)
	}
	if tenants < 2 {
		return q.Workers
	}
	return max(q.Workers*3/4, 1)
}

// API tunes the HTTP API.
type API struct {
	MaxBodyBytes int64         `yaml:"max_body_bytes" env:"SANDBOXD_MAX_BODY_BYTES" check:"positive" doc:"request bodies (413 past it)"`
	MaxWait      time.Duration `yaml:"max_wait" env:"SANDBOXD_MAX_WAIT" check:"positive" doc:"the ceiling of ?wait= on submit and get"`
}

// HTTPRequest caps the in-process http_request tool.
type HTTPRequest struct {
	MaxResponseBytes int64         `yaml:"max_response_bytes" check:"nonnegative" doc:"the response body http_request returns"`
	Timeout          time.Duration `yaml:"timeout" check:"nonnegative" doc:"one http_request call, redirects included"`
}

// Sessions configures sessions (persistent sandboxes).
type Sessions struct {
	MaxPerTenant int `yaml:"max_per_tenant" env:"SANDBOXD_MAX_SESSIONS_PER_TENANT" check:"positive" doc:"open sessions per tenant (429 session_limit past it)"`
	// DefaultTTL is a session's lifetime when the request gives none;
	// MaxTTL is the ceiling of what a request may ask.
	DefaultTTL time.Duration `yaml:"default_ttl" check:"positive" doc:"a session's lifetime when the request gives none"`
	MaxTTL     time.Duration `yaml:"max_ttl" check:"positive" doc:"the ceiling of a session's ttl_seconds"`
	// DefaultIdle closes a session unused that long (request default).
	DefaultIdle time.Duration `yaml:"default_idle" check:"positive" doc:"a session unused this long is closed, when the request gives no idle_timeout_seconds"`
	// ReapInterval is how often expired and idle sessions are closed.
	ReapInterval time.Duration `yaml:"reap_interval" check:"positive" doc:"how often expired and idle sessions are closed"`
	// MaxFileBytes caps one uploaded file; MaxArchiveBytes an uploaded
	// archive (as sent and unpacked); MaxArchiveEntries its entries.
	MaxFileBytes      int64 `yaml:"max_file_bytes" check:"positive" doc:"one uploaded file"`
	MaxArchiveBytes   int64 `yaml:"max_archive_bytes" check:"positive" doc:"one uploaded archive, as sent and unpacked"`
	MaxArchiveEntries int   `yaml:"max_archive_entries" check:"positive" doc:"the entries of one uploaded archive"`
}

// Pool configures the warm sandbox pool of one-shot jobs.
type Pool struct {
	// Size is the ready sandboxes kept per pooled profile; 0 disables.
	// Unset (nil) means the runner's default, see (*Config).Complete.
	Size *int `yaml:"size" env:"SANDBOXD_POOL_SIZE" check:"nonnegative" default:"unset: 2 (a container takes ~200 ms to create, a local sandbox ~17 ms)" doc:"ready sandboxes per pooled profile (the default profile of python_repl and bash); 0 disables the pool"`
	// MaxSandboxes caps the sandboxes alive (sessions, pooled, in use).
	MaxSandboxes int `yaml:"max_sandboxes" env:"SANDBOXD_MAX_SANDBOXES" check:"positive" doc:"sandboxes alive at once (sessions, pooled and in use): the pool stops refilling and new sessions get 429 past it"`
	// MaxReady and MemoryBudget bound the pool's growth after misses.
	MaxReady     int   `yaml:"max_ready" env:"SANDBOXD_POOL_MAX_READY" check:"nonnegative" default:"0: pool.size, no growth" doc:"the most ready sandboxes a pooled profile grows to after misses (doubling from pool.size at each miss, back down by one each idle minute without a miss); within pool.max_sandboxes and pool.memory_budget_bytes"`
	MemoryBudget int64 `yaml:"memory_budget_bytes" env:"SANDBOXD_POOL_MEMORY_BUDGET" check:"nonnegative" default:"0: none" doc:"the memory limits of a profile's ready and refilling sandboxes, summed, stay within this when the pool grows (pool.size itself is always kept)"`
	// NoPrestart keeps pooled sandboxes from starting python_repl's
	// interpreter ahead of their job (the slower path, for comparison).
	NoPrestart bool `yaml:"no_prestart" env:"SANDBOXD_POOL_NO_PRESTART" doc:"do not start python_repl's interpreter in pooled sandboxes ahead of their job (a one-shot call then starts Python itself: about 15-25 ms more)"`
}

// Retention bounds what the store keeps of finished jobs (with their
// events and artifacts).
type Retention struct {
	MaxAge   time.Duration `yaml:"max_age" check:"nonnegative" doc:"finished jobs (with their events and artifacts) older than this are deleted; 0 disables the bound"`
	MaxBytes int64         `yaml:"max_bytes" check:"nonnegative" doc:"the earliest finished jobs are deleted while the store's records take more; 0 disables the bound"`
	Interval time.Duration `yaml:"interval" check:"positive" doc:"the time between retention passes (and compactions)"`
}

// Callbacks configures completion webhooks: the callback_url a job may
// carry, POSTed the final record when the job ends.
type Callbacks struct {
	// Secret signs the deliveries of tenants without their own
	// callback_secret; with neither, a callback_url is refused (400).
	Secret string `yaml:"secret" env:"SANDBOXD_CALLBACK_SECRET" default:"none" doc:"the HMAC-SHA256 key of the X-Sandboxd-Signature of completion callbacks for tenants without their own tenants[].callback_secret; without either a job's callback_url is refused with 400"`
	// AllowPrivateCIDRs opens loopback, private or link-local networks to
	// callback URLs (sandboxd's own addresses and 0.0.0.0/8 stay closed).
	AllowPrivateCIDRs []string `yaml:"allow_private_cidrs" default:"none: callback URLs reach public addresses only" doc:"loopback, private or link-local networks (CIDRs) callback URLs may reach; a metadata address only as a single address (/32, /128); sandboxd's own listeners and 0.0.0.0/8 never"`
	// Attempts bounds the deliveries of one callback; Backoff is the first
	// delay between them (doubling); Timeout bounds one delivery.
	Attempts int           `yaml:"attempts" check:"positive" doc:"deliveries of one callback before it is given up (the first included)"`
	Backoff  time.Duration `yaml:"backoff" check:"positive" doc:"the delay before the second delivery, doubling after each failure"`
	Timeout  time.Duration `yaml:"timeout" check:"positive" doc:"one delivery: connecting, sending and the receiver's answer"`
}

// Console configures the built-in console's history of the overview
// charts, kept in memory by each sandboxd process.
type Console struct {
	// SampleInterval is the step of the fine ring (720 samples); the
	// coarse ring (1440 samples) keeps one in 12.
	SampleInterval time.Duration `yaml:"sample_interval" check:"positive" doc:"how often the console's charts sample the metrics: the last 720 samples are kept (1 h at 5s) and one in 12 of them for 1440 more (24 h), in memory, per process"`
	// MaxSeries bounds the series the rings keep; later ones are dropped.
	MaxSeries int `yaml:"max_series" check:"positive" doc:"series the console's history keeps (a metric per tenant and outcome, tool, effect or decision; a latency histogram is 23 series per tenant and tool); new series past it are not kept (the page says so). Memory: at most 8 bytes per series and sample, 2160 samples (17 MiB at 1000 series)"`
}

// Labels bounds the tags and metadata a client attaches to jobs, sessions
// and turns (so a framework can carry its run and trace ids); a request
// past a bound is refused with 400 naming it.
type Labels struct {
	MaxTags         int `yaml:"max_tags" check:"positive" doc:"tags of one job, session or turn"`
	MaxTagBytes     int `yaml:"max_tag_bytes" check:"positive" doc:"one tag (printable, not empty)"`
	MaxMetadataKeys int `yaml:"max_metadata_keys" check:"positive" doc:"metadata keys of one job, session or turn"`
	MaxKeyBytes     int `yaml:"max_metadata_key_bytes" check:"positive" doc:"one metadata key (letters, digits, '_', '-', '.', ':' or '/')"`
	MaxValueBytes   int `yaml:"max_metadata_value_bytes" check:"positive" doc:"one metadata value (printable)"`
}

// Tenant names a tenant and the API keys that authenticate as it.
type Tenant struct {
	Name    string   `yaml:"name" default:"required" doc:"the tenant's name (no spaces, at most 128 bytes)"`
	APIKeys []string `yaml:"api_keys" default:"required" doc:"the keys that authenticate as the tenant (Authorization: Bearer KEY or X-API-Key: KEY)"`
	// Policy is the tenant's guard policy (rules, budgets, tool limits,
	// rate limit, approvals, egress allowlist); nil: every call allowed
	// and no egress at all.
	Policy *policy.TenantPolicy `yaml:"policy" default:"none: every call allowed, sandboxes with http reach nothing" doc:"the guard's policy; keys: default, rules[] (tool, effect, action, reason), budgets[] (effect, limit, per, scope), tool_limits[] (tool, max_calls), rate_limit (rate, burst), approvals (timeout, webhook.url, webhook.secret), egress (allow[] of host, ports, methods; allow_private_cidrs); examples/policy.yaml shows every key"`
	// Images are the images (references on the container runners, rootfs
	// paths on the local runner) the tenant's sessions may name besides
	// the runner's configured image; empty: that image only.
	Images []string `yaml:"images" default:"none: only the runner's configured image (runner.docker.image, runner.containerd.image, runner.local.rootfs)" doc:"more images the tenant's sessions may name: references on the container runners (spellings of one image are equal: sandboxd/base = docker.io/sandboxd/base:latest), absolute rootfs paths on the local runner; anything else is a 400 naming the allowed ones, a malformed entry stops sandboxd at start"`
	// Weight is the tenant's share of the workers when several tenants
	// have jobs queued, and of the CPU when their sandboxes compete (its
	// sandboxes share a parent cgroup of this weight); MaxRunning caps its
	// running jobs (0: queue.tenant_max_running).
	Weight     int `yaml:"weight" check:"nonnegative" default:"100" doc:"the tenant's share, from 1 to 10000, of the workers while several tenants have jobs queued (jobs start in proportion to the weights) and of the CPU while their sandboxes compete (a parent cgroup per tenant: cpu.weight on cgroup v2, cpu.shares = weight*1024/100 on v1, on the local, docker and containerd runners; while two or more tenants run jobs, each is also capped at that share of the host's CPUs)"`
	MaxRunning int `yaml:"max_running" check:"nonnegative" default:"queue.tenant_max_running" doc:"the tenant's jobs running at once"`
	// CallbackSecret signs the completion callbacks of the tenant's jobs.
	CallbackSecret string `yaml:"callback_secret" default:"callbacks.secret" doc:"the HMAC-SHA256 key of the X-Sandboxd-Signature of the tenant's completion callbacks (give it to the receiver)"`
}

// DefaultTenantWeight is the weight of a tenant without its own (the
// cgroup v2 default cpu.weight).
const DefaultTenantWeight = 100

// MaxTenantWeight is the highest tenants[].weight (cgroup v2's).
const MaxTenantWeight = 10000

// TenantShare is a tenant's weight and running cap (zero: the defaults).
type TenantShare struct {
	Weight     int
	MaxRunning int
}

// Tenants is the tenants list; from the environment it reads
// SANDBOXD_API_KEYS (see UnmarshalText).
type Tenants []Tenant

// Defaults are the values of every key nothing else sets. Limits are zero
// here: their built-in values apply per field (see Limits.Effective).
func Defaults() Config {
	return Config{
		Addr:            "127.0.0.1:8080",
		MetricsAddr:     "127.0.0.1:9464",
		LogLevel:        "info",
		ShutdownTimeout: 30 * time.Second,
		ReplicaLease:    15 * time.Second,
		Runner:          Runner{Name: "local"},
		Queue:           Queue{Size: 1024, Workers: 16},
		API:             API{MaxBodyBytes: 1 << 20, MaxWait: 5 * time.Minute},
		HTTPRequest:     HTTPRequest{MaxResponseBytes: builtin.DefaultHTTPMaxResponseBytes, Timeout: builtin.DefaultHTTPTimeout},
		Sessions: Sessions{
			MaxPerTenant: 10, DefaultTTL: time.Hour, MaxTTL: 24 * time.Hour,
			DefaultIdle: 10 * time.Minute, ReapInterval: 5 * time.Second,
			MaxFileBytes: 64 << 20, MaxArchiveBytes: 256 << 20, MaxArchiveEntries: 10000,
		},
		Pool:      Pool{MaxSandboxes: 64},
		Retention: Retention{MaxAge: 7 * 24 * time.Hour, MaxBytes: 1 << 30, Interval: time.Minute},
		Callbacks: Callbacks{Attempts: 5, Backoff: time.Second, Timeout: 10 * time.Second},
		Console:   Console{SampleInterval: 5 * time.Second, MaxSeries: 1000},
		Labels:    Labels{MaxTags: 16, MaxTagBytes: 128, MaxMetadataKeys: 16, MaxKeyBytes: 64, MaxValueBytes: 512},
		Tools: Tools{
			WebSearch: WebSearch{Backend: WebSearchBackend{Format: "html"}, MaxResults: builtin.DefaultWebSearchMaxResults, CacheTTL: 5 * time.Minute},
			Cache:     ToolCache{MaxEntries: 1024, MaxResultBytes: 64 << 10},
		},
		Turns: Turns{Concurrency: 8, Retries: 2, RetryBackoff: 100 * time.Millisecond, Keep: time.Hour},
	}
}
