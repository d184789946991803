//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkTenantFairness measures a quiet tenant's python_repl print(1)
// latency on the local and Docker runners, in one run: first unloaded,
// then while a noisy tenant keeps twenty fork, memory and CPU bombs in the
// system (each resubmitted when it ends, 5 s timeout). The goal: the
// quiet tenant's loaded p99 within 2x its unloaded p99 (p99-ratio), by
// the fair queue, the per-tenant cap and the tenants' CPU groups.
//
//	go test -tags integration -run '^$' -bench TenantFairness -benchtime=20x ./integration/
func BenchmarkTenantFairness(b *testing.B) {
	tenants := `
tenants:
  - name: quiet
    api_keys: [quiet-key]
  - name: noisy
    api_keys: [noisy-key]
`
	for _, rc := range []struct{ name, config string }{
		{"local", "pool:\n  size: 2\n" + tenants},
		{"docker", dockerConfig("pool:\n  size: 2\n" + tenants)},
	} {
		b.Run(rc.name, func(b *testing.B) {
			if rc.name == "docker" {
				needDocker(b)
			}
			s := startServer(b, rc.config)
			c := &http.Client{}
			quiet := func() error {
				return keyedCall(c, s.URL, "quiet-key", "python_repl", map[string]any{"code": "print(1)"})
			}
			var unloaded []time.Duration
			b.Run("unloaded", func(b *testing.B) { unloaded = measureDurations(b, quiet) })
			if len(unloaded) == 0 {
				return
			}
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			bombs := []map[string]any{
				{"code": "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", "timeout_seconds": 5},
				{"code": "x = []\nwhile True: x.append(bytearray(1 << 20))", "timeout_seconds": 5},
				{"code": "while True: pass", "timeout_seconds": 5},
			}
			for i := range 20 {
				wg.Go(func() {
					for ctx.Err() == nil {
						_ = keyedCallCtx(ctx, c, s.URL, "noisy-key", "python_repl", bombs[i%len(bombs)]) // they fail by design
					}
				})
			}
			time.Sleep(2 * time.Second) // the bombs fill the workers and the CPU
			b.Run("loaded", func(b *testing.B) {
				loaded := measureDurations(b, quiet)
				b.ReportMetric(float64(p99(loaded))/float64(p99(unloaded)), "p99-ratio")
			})
			stop()
			wg.Wait()
		})
	}
}

// measureDurations is measure, returning the latencies. Calls are paced
// like an agent loop (the model thinks between calls, untimed: 300 ms),
// which gives the tenant's pool time to refill.
func measureDurations(b *testing.B, fn func() error) []time.Duration {
	b.Helper()
	if err := fn(); err != nil { // warm up, and fail fast
		b.Fatal(err)
	}
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		time.Sleep(300 * time.Millisecond)
		b.StartTimer()
		t0 := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99(d).Microseconds())/1000, "p99-ms")
	return d
}

func p99(sorted []time.Duration) time.Duration { return sorted[len(sorted)*99/100] }

func keyedCall(c *http.Client, base, key, tool string, args map[string]any) error {
	return keyedCallCtx(context.Background(), c, base, key, tool, args)
}

// keyedCallCtx runs a call as the key's tenant (no key: the default
// tenant) and waits for it; an error unless it succeeded.
func keyedCallCtx(ctx context.Context, c *http.Client, base, key, tool string, args map[string]any) error {
	body, _ := json.Marshal(map[string]any{"tool": tool, "arguments": args})
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/jobs?wait=true", bytes.NewReader(body))
	if err != nil {
		return err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var j jobView
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return err
	}
	if resp.StatusCode != 200 || j.Result == nil || !j.Result.OK {
		return fmt.Errorf("%s: status %d job %+v", tool, resp.StatusCode, j)
	}
	return nil
}
