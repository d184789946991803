//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkFastPaths measures issue 16's fast paths side by side, each
// group in one run with its contenders interleaved call by call (this
// machine's speed drifts) and its baselines named:
//
//	oneshot/<runner>      python_repl print(1) through the API, pooled,
//	                      paced like an agent loop (the pool refills,
//	                      untimed, before each call): the interpreter
//	                      started ahead (prestart) against pool.no_prestart
//	                      (noprestart), and bare /usr/bin/python3 -c
//	oneshot-b2b/<runner>  the same two back to back (no waiting)
//	session               a warm Docker session call against a trivial
//	                      HTTP server on loopback; cpu-ms/call is the
//	                      daemon's CPU time over the calls
//	calculator/<n>        calculator from n concurrent clients against the
//	                      trivial server at the same concurrency: calls/s
//	                      and the daemon's CPU per call
//	tti/<runner>          POST /v1/sessions then the first python_repl, the
//	                      pool holding a fitting sandbox, against pool.size 0
//	burst/docker          50 one-shots back to back and 50 with 10
//	                      concurrent, against docker run -d of the image, 10
//	                      in parallel: calls/s, p99, and the pool's hits,
//	                      misses and ready sandboxes over the burst
//
// Run briefly to check it works; the numbers are the lead's quiet run:
//
//	go test -tags integration -run '^$' -bench BenchmarkFastPaths -benchtime 5x ./integration/
func BenchmarkFastPaths(b *testing.B) {
	trivial := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("1")) }))
	defer trivial.Close()
	client := &http.Client{}
	print1 := map[string]any{"code": "print(1)"}
	bare := func() error {
		out, err := exec.Command(pyArgs[0], pyArgs[1:]...).Output()
		if err == nil && string(out) != "1\n" {
			err = fmt.Errorf("output %q", out)
		}
		return err
	}
	runners := []struct{ name, runner, runtime string }{
		{"local", "", ""}, {"docker", "docker", ""}, {"containerd", "containerd", ""}, {"containerd-runsc", "containerd", "runsc"},
	}
	config := func(runnerName, runtime string, pool int) string {
		if runnerName == "" {
			return fmt.Sprintf("pool:\n  size: %d\n", pool)
		}
		return runtimePoolConfig(runnerName, runtime, pool)
	}
	usable := func(b *testing.B, runnerName, runtime string) bool {
		switch runnerName {
		case "docker":
			needDocker(b)
		case "containerd":
			if err := exec.Command("ctr", "-n", "sandboxd", "images", "check", "name==docker.io/sandboxd/python:latest").Run(); err != nil {
				b.Skip("containerd not set up (scripts/containerd-setup.sh)")
				return false
			}
		}
		return true
	}

	for _, b2b := range []bool{false, true} {
		group := "oneshot"
		if b2b {
			group = "oneshot-b2b"
		}
		for _, rc := range runners {
			b.Run(group+"/"+rc.name, func(b *testing.B) {
				if !usable(b, rc.runner, rc.runtime) {
					return
				}
				warm := startServer(b, config(rc.runner, rc.runtime, 2))
				defer warm.stop(syscall.SIGTERM)
				cold := startServer(b, config(rc.runner, rc.runtime, 2)+"  no_prestart: true\n")
				defer cold.stop(syscall.SIGTERM)
				call := func(s *server) contender {
					return contender{fn: func() error { return apiCall(client, s.URL, "python_repl", print1) }}
				}
				cs := map[string]contender{"prestart": call(warm), "noprestart": call(cold), "bare": {fn: bare}}
				if !b2b {
					for name, s := range map[string]*server{"prestart": warm, "noprestart": cold} {
						c := cs[name]
						c.before = func() error { return waitPoolReady(s.MetricsURL, 2) }
						cs[name] = c
					}
				}
				interleave(b, []string{"bare", "prestart", "noprestart"}, cs)
			})
		}
	}

	b.Run("session", func(b *testing.B) {
		needDocker(b)
		s := startServer(b, dockerConfig(""))
		defer s.stop(syscall.SIGTERM)
		id, err := createSession(context.Background(), s.URL)
		if err != nil {
			b.Fatal(err)
		}
		defer deleteSession(s.URL, id)
		var cpu time.Duration
		pid := s.cmd.Process.Pid
		interleave(b, []string{"trivial-http", "session"}, map[string]contender{
			"trivial-http": {fn: func() error { return get(client, trivial.URL) }},
			"session": {fn: func() error {
				c0 := procCPU(pid)
				err := sessionCall(context.Background(), client, s.URL, id, "print(1)")
				cpu += procCPU(pid) - c0
				return err
			}},
		})
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "session-daemon-cpu-ms/call")
	})

	for _, n := range []int{16, 200} {
		b.Run(fmt.Sprintf("calculator/%d", n), func(b *testing.B) {
			s := startServer(b, "")
			defer s.stop(syscall.SIGTERM)
			tr := &http.Transport{MaxIdleConns: 2 * n, MaxIdleConnsPerHost: 2 * n}
			c := &http.Client{Transport: tr}
			calc := func() error {
				return apiCall(c, s.URL, "calculator", map[string]any{"expression": "2**64 // 3 + sqrt(2)"})
			}
			triv := func() error { return get(c, trivial.URL) }
			const perRound = 2000
			var apiCalls, apiTime, trivCalls, trivTime float64
			var cpu time.Duration
			concurrently(n, n, calc) // warm the connections
			concurrently(n, n, triv)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c0 := procCPU(s.cmd.Process.Pid)
				d, err := concurrently(n, perRound, calc)
				if err != nil {
					b.Fatal(err)
				}
				cpu += procCPU(s.cmd.Process.Pid) - c0
				apiCalls, apiTime = apiCalls+perRound, apiTime+d.Seconds()
				if d, err = concurrently(n, perRound, triv); err != nil {
					b.Fatal(err)
				}
				trivCalls, trivTime = trivCalls+perRound, trivTime+d.Seconds()
			}
			b.ReportMetric(apiCalls/apiTime, "api-calls/s")
			b.ReportMetric(trivCalls/trivTime, "trivial-http-calls/s")
			b.ReportMetric(float64(cpu.Microseconds())/1000/apiCalls, "daemon-cpu-ms/call")
		})
	}

	for _, rc := range runners[1:3] {
		b.Run("tti/"+rc.name, func(b *testing.B) {
			if !usable(b, rc.runner, rc.runtime) {
				return
			}
			pooled := startServer(b, config(rc.runner, rc.runtime, 2))
			defer pooled.stop(syscall.SIGTERM)
			unpooled := startServer(b, config(rc.runner, rc.runtime, 0))
			defer unpooled.stop(syscall.SIGTERM)
			tti := func(s *server) func() error {
				return func() error {
					id, err := createSession(context.Background(), s.URL)
					if err != nil {
						return err
					}
					err = sessionCall(context.Background(), client, s.URL, id, "print(1)")
					go deleteSession(s.URL, id) // untimed
					return err
				}
			}
			interleave(b, []string{"pooled", "pool-size-0"}, map[string]contender{
				"pooled":      {fn: tti(pooled), before: func() error { return waitPoolReady(pooled.MetricsURL, 2) }},
				"pool-size-0": {fn: tti(unpooled)},
			})
		})
	}

	b.Run("burst/docker", func(b *testing.B) {
		needDocker(b)
		const size = 50
		// pool.max_ready lets the pool grow after the burst's first misses.
		s := startServer(b, dockerConfig("pool:\n  size: 2\n  max_ready: 8\n"))
		defer s.stop(syscall.SIGTERM)
		label := fmt.Sprintf("sandboxd-bench-burst=%d", os.Getpid())
		defer func() {
			out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+label).Output()
			if ids := strings.Fields(string(out)); len(ids) > 0 {
				exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
			}
		}()
		oneshot := func() error { return apiCall(client, s.URL, "python_repl", print1) }
		dockerRun := func() error {
			out, err := exec.Command("docker", "run", "-d", "--network", "none", "--label", label, "sandboxd/python:latest", "sleep", "60").Output()
			if err == nil {
				go exec.Command("docker", "rm", "-f", strings.TrimSpace(string(out))).Run() // untimed
			}
			return err
		}
		type line struct {
			name string
			conc int
			fn   func() error
		}
		lines := []line{{"b2b", 1, oneshot}, {"conc10", 10, oneshot}, {"docker-run-d-conc10", 10, dockerRun}}
		lat := map[string][]time.Duration{}
		rate := map[string]float64{}
		var minReady, maxReady float64 = 1e9, 0
		hits0, miss0 := metricValueB(s, "sandboxd_pool_hits_total"), metricValueB(s, "sandboxd_pool_misses_total")
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for _, l := range lines {
				if l.fn != nil && l.name != "docker-run-d-conc10" {
					if err := waitPoolReady(s.MetricsURL, 2); err != nil {
						b.Fatal(err)
					}
				}
				stop := make(chan struct{})
				var sampler sync.WaitGroup
				if l.name != "docker-run-d-conc10" {
					sampler.Go(func() {
						for {
							v := metricValueB(s, "sandboxd_pool_ready")
							minReady, maxReady = min(minReady, v), max(maxReady, v)
							select {
							case <-stop:
								return
							case <-time.After(50 * time.Millisecond):
							}
						}
					})
				}
				d, ds, err := timed(l.conc, size, l.fn)
				close(stop)
				sampler.Wait()
				if err != nil {
					b.Fatalf("%s: %v", l.name, err)
				}
				lat[l.name] = append(lat[l.name], ds...)
				rate[l.name] += float64(size) / d.Seconds() / float64(b.N)
			}
		}
		b.StopTimer()
		for _, l := range lines {
			d := lat[l.name]
			slices.Sort(d)
			b.ReportMetric(rate[l.name], l.name+"-calls/s")
			b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, l.name+"-p50-ms")
			b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, l.name+"-p99-ms")
		}
		b.ReportMetric(metricValueB(s, "sandboxd_pool_hits_total")-hits0, "pool-hits")
		b.ReportMetric(metricValueB(s, "sandboxd_pool_misses_total")-miss0, "pool-misses")
		b.ReportMetric(minReady, "pool-ready-min")
		b.ReportMetric(maxReady, "pool-ready-max")
	})
}

// contender is one interleaved line: fn is timed, before (optional) not.
type contender struct{ fn, before func() error }

// interleave runs every contender once per iteration, in order, and
// reports each one's median and 99th percentile.
func interleave(b *testing.B, order []string, cs map[string]contender) {
	b.Helper()
	for _, name := range order { // warm up, and fail fast
		if err := cs[name].fn(); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
	}
	times := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, name := range order {
			c := cs[name]
			if c.before != nil {
				b.StopTimer()
				if err := c.before(); err != nil {
					b.Fatalf("%s: %v", name, err)
				}
				b.StartTimer()
			}
			t0 := time.Now()
			if err := c.fn(); err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			times[name] = append(times[name], time.Since(t0))
		}
	}
	b.StopTimer()
	for _, name := range order {
		d := times[name]
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, name+"-p99-ms")
	}
}

// concurrently runs fn total times from conc goroutines and returns the
// wall time.
func concurrently(conc, total int, fn func() error) (time.Duration, error) {
	d, _, err := timed(conc, total, fn)
	return d, err
}

// timed is concurrently with each call's latency.
func timed(conc, total int, fn func() error) (time.Duration, []time.Duration, error) {
	var mu sync.Mutex
	var firstErr error
	lat := make([]time.Duration, 0, total)
	next := 0
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				mu.Lock()
				if next >= total || firstErr != nil {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				t0 := time.Now()
				err := fn()
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return time.Since(start), lat, firstErr
}

func get(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var buf [16]byte
	n, _ := resp.Body.Read(buf[:])
	if resp.StatusCode != 200 || string(buf[:n]) != "1" {
		return fmt.Errorf("trivial server: %d %q", resp.StatusCode, buf[:n])
	}
	return nil
}

// procCPU is the user and system CPU time of pid so far.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ 100
}

func metricValueB(s *server, name string) float64 {
	for _, line := range strings.Split(string(s.getMetrics()), "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return 0
}
