package hostside

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

func TestReapEvery(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	var n atomic.Int32
	reap := func(context.Context) error { n.Add(1); return errors.New("keeps going after a failure") }
	ReapEvery(t.Context(), -1, reap, log, "off") // returns at once
	if n.Load() != 0 {
		t.Fatal("reaped with a negative interval")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { ReapEvery(ctx, 5*time.Millisecond, reap, log, "test"); close(done) }()
	for deadline := time.Now().Add(5 * time.Second); n.Load() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("reaped %d times in 5 s", n.Load())
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("ReapEvery did not return after its context ended")
	}
}
