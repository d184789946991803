package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/runnertest"
	"github.com/sandboxd/sandboxd/store"
	"github.com/sandboxd/sandboxd/tools"
)

// BenchmarkKwok measures the runner's control plane on a cluster of kwok's
// fake nodes (scripts/kwok-bench.sh starts one and runs this with
// -benchtime=1x; it skips unless SANDBOXD_KWOK_KUBECONFIG is set). kwok
// pods run no agent: Create returns once the pod runs with an IP (the
// runner's noDial), so what is measured is the runner up to the agent dial
// (Secret and Pod create, scheduling, kwok's Running, the runner's watch)
// and Close (Pod and Secret delete). The pods are buildPod's, unchanged.
//
//   - sequential: SANDBOXD_KWOK_SEQ Create→Close one after another;
//   - concurrent: SANDBOXD_KWOK_PODS of them, SANDBOXD_KWOK_CONCURRENCY at
//     once, through New's client (QPS 200, burst 400);
//   - concurrent-noqps: the same through a client without a rate limit
//     (the cluster's own bound);
//   - pool-burst: the job service's warm pool (SANDBOXD_KWOK_POOL_SIZE
//     ready, growing after misses up to SANDBOXD_KWOK_POOL_MAX_READY,
//     default the burst; SANDBOXD_KWOK_WORKERS workers) under SANDBOXD_KWOK_BURST one-shot jobs submitted at once;
//     a job's Exec is a no-op (no agent): its latency is the queue, the
//     pool take or a fresh pod, and the release;
//
// and for each the runner's own API requests by verb and resource (counted
// in its transport), its peak open watches, and the apiserver's
// apiserver_request_total deltas (every client: the runner, the scheduler,
// kwok) and open watches; with SANDBOXD_KWOK_PIDS ("name:pid ...") the
// CPU seconds of those processes and of this one.
func BenchmarkKwok(b *testing.B) {
	kc := os.Getenv("SANDBOXD_KWOK_KUBECONFIG")
	if kc == "" {
		b.Skip("no kwok cluster: SANDBOXD_KWOK_KUBECONFIG unset (scripts/kwok-bench.sh sets it)")
	}
	admKC := os.Getenv("SANDBOXD_KWOK_ADMIN_KUBECONFIG")
	if admKC == "" {
		admKC = kc
	}
	nodes := kwokEnvInt("SANDBOXD_KWOK_NODES", 1000)
	pods := kwokEnvInt("SANDBOXD_KWOK_PODS", 1000)
	seq := kwokEnvInt("SANDBOXD_KWOK_SEQ", 200)
	conc := kwokEnvInt("SANDBOXD_KWOK_CONCURRENCY", 50)
	burst := kwokEnvInt("SANDBOXD_KWOK_BURST", 1000)
	poolSize := kwokEnvInt("SANDBOXD_KWOK_POOL_SIZE", 100)
	workers := kwokEnvInt("SANDBOXD_KWOK_WORKERS", 100)
	maxReady := kwokEnvInt("SANDBOXD_KWOK_POOL_MAX_READY", burst)
	ctx := context.Background()
	const ns = "sandboxd-kwok"

	arc, err := clientcmd.BuildConfigFromFlags("", admKC)
	if err != nil {
		b.Fatal(err)
	}
	arc.QPS, arc.Burst = 500, 1000
	adm, err := kubernetes.NewForConfig(arc)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	kwokSetup(b, adm, ns, nodes)
	fmt.Printf("kwok: %d nodes Ready, namespace %s (%.1fs)\n", nodes, ns, time.Since(t0).Seconds())

	// The runner as New makes it (client QPS 200, burst 400), through a
	// transport that counts its requests; and one whose client has no
	// rate limit, to see the cluster's own bound.
	newRunner := func(qps float32, burst int) (*Runner, *apiCounter) {
		rc, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			b.Fatal(err)
		}
		rc.QPS, rc.Burst = qps, burst
		cnt := &apiCounter{n: map[string]int{}}
		rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { cnt.next = rt; return cnt })
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			b.Fatal(err)
		}
		r, err := New(ctx, Config{Client: cs, Namespace: ns, StateDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close(ctx) })
		r.noDial = true
		return r, cnt
	}
	r, cnt := newRunner(200, 400) // New's
	ru, cntU := newRunner(-1, 0)
	iso := runnertest.Isolation(runner.WorkspaceNone, runner.NetworkNone)
	procs := kwokProcs(os.Getenv("SANDBOXD_KWOK_PIDS"))

	var table []kwokRow
	var loads []kwokLoad
	phase := func(name string, cnt *apiCounter, f func(b *testing.B) kwokRow) {
		b.Run(name, func(b *testing.B) {
			before := kwokSnap(b, adm, cnt, procs)
			row := f(b)
			after := kwokSnap(b, adm, cnt, procs)
			row.name = name
			table = append(table, row)
			loads = append(loads, kwokLoad{name: name, before: before, after: after, peakWatches: cnt.peak.Swap(cnt.watches.Load())})
			l := loads[len(loads)-1]
			made := float64(max(row.n, 1))
			if row.pods > 0 {
				made = float64(row.pods)
			}
			b.ReportMetric(float64(sumMap(l.after.runner)-sumMap(l.before.runner))/made, "runner-req/pod")
			b.ReportMetric(float64(sumMap(l.after.api)-sumMap(l.before.api))/made, "apiserver-req/pod")
			b.ReportMetric(float64(l.peakWatches), "runner-peak-watches")
		})
	}

	cycle := func(b *testing.B, r *Runner) (create, del time.Duration) {
		t := time.Now()
		sb, err := r.Create(ctx, runner.SandboxSpec{Isolation: iso})
		if err != nil {
			b.Fatal(err)
		}
		create = time.Since(t)
		t = time.Now()
		if err := sb.Close(ctx); err != nil {
			b.Fatal(err)
		}
		return create, time.Since(t)
	}
	runCycles := func(b *testing.B, r *Runner, n, c int) kwokRow {
		creates := make([]time.Duration, n)
		dels := make([]time.Duration, n)
		var next atomic.Int64
		var wg sync.WaitGroup
		t := time.Now()
		for range c {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= n {
						return
					}
					creates[i], dels[i] = cycle(b, r)
				}
			})
		}
		wg.Wait()
		el := time.Since(t)
		row := kwokRow{n: n, conc: c, wall: el, p50: pct(creates, 50), p99: pct(creates, 99), delP50: pct(dels, 50), delP99: pct(dels, 99)}
		b.ReportMetric(float64(n)/el.Seconds(), "sandboxes/s")
		b.ReportMetric(ms(row.p50), "create-running-p50-ms")
		b.ReportMetric(ms(row.p99), "create-running-p99-ms")
		b.ReportMetric(ms(row.delP50), "delete-p50-ms")
		b.ReportMetric(ms(row.delP99), "delete-p99-ms")
		return row
	}
	phase("sequential", cnt, func(b *testing.B) kwokRow { return runCycles(b, r, seq, 1) })
	phase("concurrent", cnt, func(b *testing.B) kwokRow { return runCycles(b, r, pods, conc) })
	phase("concurrent-noqps", cntU, func(b *testing.B) kwokRow { return runCycles(b, ru, pods, conc) })
	phase("pool-burst", cnt, func(b *testing.B) kwokRow { return kwokPoolBurst(b, r, burst, poolSize, maxReady, workers) })

	kwokPrint(nodes, table, loads)
}

type kwokRow struct {
	name                         string
	n, conc, failed              int
	pods                         int // pods made in the phase, when not n
	wall                         time.Duration
	p50, p99, delP50, delP99     time.Duration
	note                         string
	hits, misses                 float64
	refill                       time.Duration
	refillN                      int
	poolCreateP50, poolCreateP99 time.Duration
}

// kwokPoolBurst: the job service's pool in front of r (its sandboxes'
// Exec a no-op), pre-warmed to poolSize, then burst one-shot jobs at once.
func kwokPoolBurst(b *testing.B, r *Runner, burst, poolSize, maxReady, workers int) kwokRow {
	ctx := context.Background()
	dir := b.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	reg := tools.NewRegistry()
	if err := reg.Register(&tools.Tool{Name: "sh", InputSchema: json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"string"}}}`),
		Effects: []tools.Effect{tools.EffectExec},
		Command: func(a map[string]any) (tools.Command, error) {
			c, _ := a["cmd"].(string)
			return tools.Command{Args: []string{"/bin/sh", "-c", c}}, nil
		}}); err != nil {
		b.Fatal(err)
	}
	prom := prometheus.NewRegistry()
	nr := &noAgentRunner{r: r}
	svc, err := job.New(job.Config{
		Queue:   config.Queue{Workers: workers, Size: 2 * burst},
		Pool:    config.Pool{Size: &poolSize, MaxReady: max(maxReady, poolSize), MaxSandboxes: 2*burst + poolSize},
		WorkDir: filepath.Join(dir, "work"), Metrics: job.NewMetrics(prom),
	}, st, reg, nr)
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		b.Fatal(err)
	}
	shut := func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		_ = svc.Shutdown(sctx)
	}
	defer shut()
	t := time.Now()
	waitFor(b, "pool pre-warm", 5*time.Minute, func() bool { return promValue(prom, "sandboxd_pool_ready") >= float64(poolSize) })
	fmt.Printf("pool-burst: %d ready in %.1fs\n", poolSize, time.Since(t).Seconds())
	nr.reset()

	lat := make([]time.Duration, burst)
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range burst {
		wg.Go(func() {
			<-start
			t := time.Now()
			j, _, err := svc.Submit(ctx, "acme", job.SubmitRequest{Call: tools.Call{Name: "sh", Arguments: json.RawMessage(`{"cmd":"true"}`)}})
			if err == nil {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
				j, err = svc.Wait(wctx, "acme", j.ID)
				cancel()
			}
			lat[i] = time.Since(t)
			if err != nil || j.State != job.StateSucceeded {
				lat[i] = -1
				if failed.Add(1) <= 3 {
					reason := ""
					if j != nil {
						reason = string(j.State) + " " + j.Reason
					}
					b.Logf("job %d: %v %s", i, err, reason)
				}
			}
		})
	}
	t = time.Now()
	close(start)
	wg.Wait()
	el := time.Since(t)
	// A job that failed (its sandbox not running within CreateTimeout) is
	// counted, not fatal: that is what the burst measures too.
	nfailed := int(failed.Load())
	hits, misses := promValue(prom, "sandboxd_pool_hits_total"), promValue(prom, "sandboxd_pool_misses_total")
	// Refill: until no pooled create is under way, from the burst's start.
	// (for half a second: a release's refill may start a moment later)
	var idle, refilled time.Time
	waitFor(b, "pool refill", 10*time.Minute, func() bool {
		if nr.inflight.Load() != 0 {
			idle = time.Time{}
			return false
		}
		if idle.IsZero() {
			idle = time.Now()
		}
		refilled = idle
		return time.Since(idle) > 500*time.Millisecond
	})
	refill := refilled.Sub(t)
	ready := int(promValue(prom, "sandboxd_pool_ready"))
	poolCreates, missCreates := nr.durations()
	lat = slices.DeleteFunc(lat, func(d time.Duration) bool { return d < 0 })
	row := kwokRow{n: burst, conc: workers, pods: poolSize + len(poolCreates) + len(missCreates), failed: nfailed, wall: el, p50: pct(lat, 50), p99: pct(lat, 99), hits: hits, misses: misses,
		refill: refill, refillN: ready, poolCreateP50: pct(poolCreates, 50), poolCreateP99: pct(poolCreates, 99),
		note: fmt.Sprintf("%d of %d jobs failed (p50/p99 of the others); pool %d, max_ready %d, %d workers; %d pooled creates (p50 %.0f p99 %.0f ms), %d creates on a miss (p50 %.0f p99 %.0f ms)",
			nfailed, burst, poolSize, maxReady, workers, len(poolCreates), ms(pct(poolCreates, 50)), ms(pct(poolCreates, 99)),
			len(missCreates), ms(pct(missCreates, 50)), ms(pct(missCreates, 99)))}
	b.ReportMetric(float64(burst)/el.Seconds(), "jobs/s")
	b.ReportMetric(el.Seconds(), "serve-all-s")
	b.ReportMetric(ms(row.p50), "job-p50-ms")
	b.ReportMetric(ms(row.p99), "job-p99-ms")
	b.ReportMetric(float64(nfailed), "jobs-failed")
	b.ReportMetric(hits, "pool-hits")
	b.ReportMetric(misses, "pool-misses")
	b.ReportMetric(refill.Seconds(), "refilled-s")
	b.ReportMetric(float64(ready), "ready-after-refill")
	t3 := time.Now()
	shut()
	fmt.Printf("pool-burst: shutdown (deletes %d ready) %.1fs\n", ready, time.Since(t3).Seconds())
	return row
}

// noAgentRunner is r for the job service: its sandboxes' Exec succeeds at
// once (kwok pods run no agent). It counts the Creates of pooled
// sandboxes ("pool_" IDs) and of jobs' own (misses) with their latency.
type noAgentRunner struct {
	r        *Runner
	inflight atomic.Int64
	mu       sync.Mutex
	pool     []time.Duration
	miss     []time.Duration
}

func (n *noAgentRunner) Name() string                      { return n.r.Name() }
func (n *noAgentRunner) Capabilities() runner.Capabilities { return n.r.Capabilities() }

func (n *noAgentRunner) Create(ctx context.Context, spec runner.SandboxSpec) (runner.Sandbox, error) {
	n.inflight.Add(1)
	defer n.inflight.Add(-1)
	t := time.Now()
	sb, err := n.r.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	d := time.Since(t)
	n.mu.Lock()
	if strings.HasPrefix(spec.ID, "pool_") {
		n.pool = append(n.pool, d)
	} else {
		n.miss = append(n.miss, d)
	}
	n.mu.Unlock()
	return noAgentSandbox{sb}, nil
}

func (n *noAgentRunner) reset() {
	n.mu.Lock()
	n.pool, n.miss = nil, nil
	n.mu.Unlock()
}

func (n *noAgentRunner) durations() (pool, miss []time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.pool), slices.Clone(n.miss)
}

type noAgentSandbox struct{ sb runner.Sandbox }

func (s noAgentSandbox) ID() string { return s.sb.ID() }
func (s noAgentSandbox) Exec(context.Context, runner.Process) (runner.Result, error) {
	return runner.Result{}, nil
}
func (s noAgentSandbox) Stats(context.Context) (runner.Usage, error) { return runner.Usage{}, nil }
func (s noAgentSandbox) Close(ctx context.Context) error             { return s.sb.Close(ctx) }

// kwokSetup creates the namespace, its default ServiceAccount (no
// controller-manager here) and nodes fake nodes for kwok, and waits until
// kwok has made them all Ready.
func kwokSetup(b *testing.B, adm kubernetes.Interface, ns string, nodes int) {
	ctx := context.Background()
	if _, err := adm.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	if _, err := adm.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var ferr atomic.Value
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= nodes {
					return
				}
				name := fmt.Sprintf("kwok-node-%04d", i)
				n := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
						Labels: map[string]string{"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
					Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
				}
				if _, err := adm.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					ferr.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := ferr.Load().(error); err != nil {
		b.Fatal(err)
	}
	waitFor(b, fmt.Sprintf("%d nodes Ready", nodes), 5*time.Minute, func() bool {
		l, err := adm.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
		if err != nil {
			return false
		}
		ready := 0
		for _, n := range l.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && len(n.Spec.Taints) == 0 {
					ready++
				}
			}
		}
		return ready >= nodes
	})
}

// apiCounter counts the requests through it by verb and resource, and its
// open watches.
type apiCounter struct {
	next          http.RoundTripper
	mu            sync.Mutex
	n             map[string]int
	watches, peak atomic.Int64
}

func (c *apiCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	verb, res := apiVerb(req)
	c.mu.Lock()
	c.n[verb+" "+res]++
	c.mu.Unlock()
	resp, err := c.next.RoundTrip(req)
	if err == nil && verb == "watch" {
		w := c.watches.Add(1)
		for {
			p := c.peak.Load()
			if w <= p || c.peak.CompareAndSwap(p, w) {
				break
			}
		}
		resp.Body = &watchBody{ReadCloser: resp.Body, c: c}
	}
	return resp, err
}

func (c *apiCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

type watchBody struct {
	io.ReadCloser
	c    *apiCounter
	once sync.Once
}

func (w *watchBody) Close() error {
	w.once.Do(func() { w.c.watches.Add(-1) })
	return w.ReadCloser.Close()
}

// apiVerb is a request's verb and resource as apiserver_request_total
// names them, lower-cased (post, put, list and watch: GETs without a
// name, ...).
func apiVerb(req *http.Request) (verb, res string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return strings.ToLower(req.Method), req.URL.Path
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	if len(rest) == 0 {
		return strings.ToLower(req.Method), "?"
	}
	res = rest[0]
	if len(rest) >= 3 {
		res += "/" + rest[2]
	}
	named := len(rest) >= 2
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "post"
	case http.MethodPut:
		verb = "put"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(req.Method)
	}
	return verb, res
}

// kwokSnapshot: the runner's requests, the apiserver's by verb and resource
// (all clients), its open watches by resource, and the processes' CPU.
type kwokSnapshot struct {
	runner, api, watches map[string]int
	rejected             int // apiserver_request_total code 429: priority and fairness's rejections
	cpu                  map[string]float64
	at                   time.Time
}

type kwokLoad struct {
	name          string
	before, after kwokSnapshot
	peakWatches   int64
}

var promLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$`)
var promLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"`)

func kwokSnap(b *testing.B, adm kubernetes.Interface, cnt *apiCounter, procs []kwokProc) kwokSnapshot {
	s := kwokSnapshot{runner: cnt.snapshot(), api: map[string]int{}, watches: map[string]int{}, cpu: map[string]float64{}, at: time.Now()}
	raw, err := adm.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Logf("apiserver /metrics: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := promLine.FindStringSubmatch(sc.Text())
		if m == nil || (m[1] != "apiserver_request_total" && m[1] != "apiserver_longrunning_requests") {
			continue
		}
		l := map[string]string{}
		for _, kv := range promLabel.FindAllStringSubmatch(m[2], -1) {
			l[kv[1]] = kv[2]
		}
		v, _ := strconv.ParseFloat(m[3], 64)
		key := strings.ToLower(l["verb"]) + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		if m[1] == "apiserver_request_total" {
			s.api[key] += int(v)
			if l["code"] == "429" {
				s.rejected += int(v)
			}
		} else if l["verb"] == "WATCH" {
			s.watches[l["resource"]] += int(v)
		}
	}
	for _, p := range procs {
		s.cpu[p.name] = procCPU(p.pid)
	}
	s.cpu["bench (runner, job service)"] = procCPU(os.Getpid())
	return s
}

type kwokProc struct {
	name string
	pid  int
}

func kwokProcs(s string) []kwokProc {
	var out []kwokProc
	for _, f := range strings.Fields(s) {
		name, pid, ok := strings.Cut(f, ":")
		if n, err := strconv.Atoi(pid); ok && err == nil {
			out = append(out, kwokProc{name, n})
		}
	}
	return out
}

// procCPU is pid's user+system CPU seconds (USER_HZ 100).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	sy, _ := strconv.ParseFloat(f[12], 64)
	return (u + sy) / 100
}

func kwokPrint(nodes int, table []kwokRow, loads []kwokLoad) {
	w := os.Stdout
	fmt.Fprintf(w, "\n== BenchmarkKwok: %d kwok nodes; runner up to the agent dial (kwok pods run no agent) ==\n", nodes)
	fmt.Fprintf(w, "%-17s %6s %5s %8s %9s %11s %11s %10s %10s\n", "phase", "n", "conc", "wall s", "per s", "p50 ms", "p99 ms", "del p50", "del p99")
	for _, r := range table {
		del := fmt.Sprintf("%10.1f %10.1f", ms(r.delP50), ms(r.delP99))
		if r.note != "" {
			del = fmt.Sprintf("%10s %10s", "-", "-")
		}
		fmt.Fprintf(w, "%-17s %6d %5d %8.1f %9.1f %11.1f %11.1f %s\n", r.name, r.n, r.conc, r.wall.Seconds(), float64(r.n)/r.wall.Seconds(),
			ms(r.p50), ms(r.p99), del)
	}
	fmt.Fprintln(w, "(sequential/concurrent: p50/p99 of Create, i.e. create -> running; pool-burst: of a job, submit -> finished)")
	for _, r := range table {
		if r.note != "" {
			fmt.Fprintf(w, "%s: pool hits %.0f, misses %.0f; %s; refilled %.1fs after the burst's start, %d ready\n", r.name, r.hits, r.misses, r.note, r.refill.Seconds(), r.refillN)
		}
	}
	for _, l := range loads {
		el := l.after.at.Sub(l.before.at).Seconds()
		fmt.Fprintf(w, "\n-- %s (%.1fs): requests, runner's own | apiserver's (all clients), per second --\n", l.name, el)
		keys := map[string]bool{}
		for k := range l.after.api {
			if l.after.api[k]-l.before.api[k] > 0 {
				keys[k] = true
			}
		}
		for k := range l.after.runner {
			if l.after.runner[k]-l.before.runner[k] > 0 {
				keys[k] = true
			}
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Slice(sorted, func(i, j int) bool {
			return l.after.api[sorted[i]]-l.before.api[sorted[i]] > l.after.api[sorted[j]]-l.before.api[sorted[j]]
		})
		for _, k := range sorted {
			rn, an := l.after.runner[k]-l.before.runner[k], l.after.api[k]-l.before.api[k]
			fmt.Fprintf(w, "  %-38s runner %7d (%7.1f/s)   apiserver %7d (%7.1f/s)\n", k, rn, float64(rn)/el, an, float64(an)/el)
		}
		rt, at := sumMap(l.after.runner)-sumMap(l.before.runner), sumMap(l.after.api)-sumMap(l.before.api)
		fmt.Fprintf(w, "  %-38s runner %7d (%7.1f/s)   apiserver %7d (%7.1f/s), %d of them answered 429\n", "total", rt, float64(rt)/el, at, float64(at)/el, l.after.rejected-l.before.rejected)
		fmt.Fprintf(w, "  watches: runner's peak open %d; apiserver's open at the end: %d (pods %d, secrets %d, nodes %d; the rest are the scheduler's and kwok's informers)\n",
			l.peakWatches, sumMap(l.after.watches), l.after.watches["pods"], l.after.watches["secrets"], l.after.watches["nodes"])
		var cpu []string
		for _, name := range slices.Sorted(maps.Keys(l.after.cpu)) {
			d := l.after.cpu[name] - l.before.cpu[name]
			cpu = append(cpu, fmt.Sprintf("%s %.1fs (%.0f%%)", name, d, 100*d/el))
		}
		fmt.Fprintf(w, "  CPU: %s\n", strings.Join(cpu, ", "))
	}
}

func sumMap(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)*p/100, len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func kwokEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func waitFor(b *testing.B, what string, d time.Duration, ok func() bool) {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// promValue sums the samples of metric name in reg.
func promValue(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				v += m.Counter.GetValue()
			case m.Gauge != nil:
				v += m.Gauge.GetValue()
			}
		}
	}
	return v
}
