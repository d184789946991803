package job_test

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkGuardOverhead measures what the guard adds to a call: the same
// call of a sandboxed tool with the exec effect (submit, run on the fake
// runner, wait) on two services, one whose tenant has
// a policy (rules, an effect budget, a tool limit, a rate limit) and one
// without, interleaved call by call so machine drift hits both alike. It
// reports the medians and their difference (goal: at most 100 µs).
func BenchmarkGuardOverhead(b *testing.B) {
	off := newHarness(b)
	on := newHarness(b, withPolicy(b, "acme", `
rules:
  - tool: bash
    action: confirm
  - effect: http
    action: deny
budgets:
  - effect: exec
    limit: 1000000000
    per: 1h
tool_limits:
  - tool: python_repl
    max_calls: 100
rate_limit:
  rate: 1000000
  burst: 1000000
`))
	run := func(h *harness) time.Duration {
		start := time.Now()
		j, _, err := h.svc.Submit(context.Background(), "acme", call("echo", `{"text":"hi"}`))
		if err != nil {
			b.Fatal(err)
		}
		if j, err = h.svc.Wait(context.Background(), "acme", j.ID); err != nil || j.Result == nil || !j.Result.OK {
			b.Fatalf("job %+v: %v", j, err)
		}
		if (h == on) != (j.Guard != nil && len(j.Guard.Spend) == 1) {
			b.Fatalf("guard record %+v on the wrong service", j.Guard)
		}
		return time.Since(start)
	}
	for range 20 { // warm up both
		run(off)
		run(on)
	}
	var dOff, dOn []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			dOff = append(dOff, run(off))
			dOn = append(dOn, run(on))
		} else {
			dOn = append(dOn, run(on))
			dOff = append(dOff, run(off))
		}
	}
	b.StopTimer()
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	mOff, mOn := med(dOff), med(dOn)
	b.ReportMetric(float64(mOff.Microseconds()), "off-p50-µs")
	b.ReportMetric(float64(mOn.Microseconds()), "on-p50-µs")
	b.ReportMetric(float64((mOn - mOff).Microseconds()), "overhead-p50-µs")
}
