//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkTurnBatch measures a batch of 8 one-shot calls outside a
// session (POST /v1/tool-calls) against the slowest of the same 8 calls
// sent alone, side by side in one run: each round times the 8 single
// calls one after the other, then the batch (the order alternates from
// round to round), and reports the batch's time over the slowest single
// call's (goal: at most 1.5). Workloads: python_repl sleeping 200 ms, and
// calculator. Runners: local and Docker, each with a warm pool of 8
// (before every timed call, untimed, the bench waits until the pool is
// full again, so every call takes a warm sandbox).
//
//	go test -tags integration -run '^$' -bench BenchmarkTurnBatch -benchtime 10x ./integration/
func BenchmarkTurnBatch(b *testing.B) {
	work := []struct {
		name, tool, args string
	}{
		{"python-sleep-200ms", "python_repl", `{"code":"import time\ntime.sleep(0.2)\nprint('ok')"}`},
		{"calculator", "calculator", `{"expression":"2**100 // 7"}`},
	}
	runners := []struct {
		name, config string
		pool         int
	}{
		{"local-pool8", "local", 8},
		{"docker-pool8", "docker", 8},
	}
	for _, rn := range runners {
		b.Run(rn.name, func(b *testing.B) {
			pool := fmt.Sprintf("pool:\n  size: %d\n  max_sandboxes: 32\n", rn.pool)
			cfg := pool
			if rn.config == "docker" {
				needDocker(b)
				cfg = dockerConfig(pool)
			}
			s := startServer(b, cfg)
			client := &http.Client{}
			ready := func() {
				if rn.pool > 0 {
					if err := waitPoolReady(s.MetricsURL, rn.pool); err != nil {
						b.Fatal(err)
					}
				}
			}
			for _, w := range work {
				b.Run(w.name, func(b *testing.B) {
					call := func(id string) string {
						a, _ := json.Marshal(w.args)
						return fmt.Sprintf(`{"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}`, id, w.tool, a)
					}
					single := func(i int) time.Duration {
						ready()
						return postTimed(b, client, s.URL, `[`+call(fmt.Sprintf("s%d", i))+`]`, 1)
					}
					batch := func() time.Duration {
						ready()
						calls := make([]string, 8)
						for i := range calls {
							calls[i] = call(fmt.Sprintf("b%d", i))
						}
						return postTimed(b, client, s.URL, `[`+strings.Join(calls, ",")+`]`, 8)
					}
					single(0) // warm up both paths (untimed)
					batch()
					var batches, slowest, ratios []float64
					b.ResetTimer()
					for r := 0; r < b.N; r++ {
						var bt, worst time.Duration
						if r%2 == 1 {
							bt = batch()
						}
						for i := range 8 {
							worst = max(worst, single(i))
						}
						if r%2 == 0 {
							bt = batch()
						}
						batches = append(batches, ms(bt))
						slowest = append(slowest, ms(worst))
						ratios = append(ratios, float64(bt)/float64(worst))
					}
					b.StopTimer()
					b.ReportMetric(median(batches), "batch8-p50-ms")
					b.ReportMetric(median(slowest), "slowest-single-p50-ms")
					b.ReportMetric(median(ratios), "ratio-p50")
					b.ReportMetric(slices.Max(ratios), "ratio-max")
				})
			}
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// postTimed posts one turn and returns how long the answer took; every
// call must have succeeded.
func postTimed(b *testing.B, client *http.Client, base, body string, calls int) time.Duration {
	start := time.Now()
	resp, err := client.Post(base+"/v1/tool-calls", "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	var tv struct {
		Mode  string `json:"mode"`
		Calls []struct {
			OK bool `json:"ok"`
		} `json:"calls"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(data, &tv) != nil || len(tv.Calls) != calls {
		b.Fatalf("turn: %d %s", resp.StatusCode, data)
	}
	for _, c := range tv.Calls {
		if !c.OK {
			b.Fatalf("a call failed: %s", data)
		}
	}
	if calls > 1 && tv.Mode != "parallel" {
		b.Fatalf("mode %s", tv.Mode)
	}
	return d
}
