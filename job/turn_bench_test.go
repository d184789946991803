package job_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// BenchmarkTurnInProcess: a batch of n in-process calls (add) through the
// turn executor, the store and the guard-free path: the executor's own
// cost per call.
func BenchmarkTurnInProcess(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("calls-%d", n), func(b *testing.B) {
			h := newHarness(b, func(c *job.Config, _ *harness) { c.Queue.Workers = 16 })
			turns := job.NewTurns(h.svc, job.TurnConfig{})
			calls := make([]string, n)
			for i := range calls {
				calls[i] = fmt.Sprintf(`{"type":"tool_use","id":"t%d","name":"add","input":{"a":1,"b":2}}`, i)
			}
			turn, err := tools.ParseTurn([]byte("[" + strings.Join(calls, ",") + "]"))
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				bt, err := turns.Submit(b.Context(), "acme", job.TurnRequest{Turn: turn})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := turns.Wait(b.Context(), "acme", bt.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
