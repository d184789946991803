package hostside

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
)

// A dead replica's sandboxes are found by their replica label, whoever's
// instance made them; another replica's and the sandboxes this instance
// holds stay.
func TestReapReplica(t *testing.T) {
	in := &Instance{Name: "test", ID: "inst-me", Log: slog.New(slog.DiscardHandler), Started: time.Now(), held: map[string]bool{"sb-held": true}}
	l := in.Labels(runner.SandboxSpec{ID: "x", Replica: "r2"})
	if l[LabelReplica] != "r2" {
		t.Fatalf("labels %v lack the replica", l)
	}
	if l := in.Labels(runner.SandboxSpec{ID: "x"}); l[LabelReplica] != "" {
		t.Fatalf("labels of a single process name a replica: %v", l)
	}
	found := []Found{
		{ID: "c1", Labels: map[string]string{LabelOwner: "inst-dead", LabelSandbox: "sb1", LabelReplica: "r2"}},
		{ID: "c2", Labels: map[string]string{LabelOwner: "inst-other", LabelSandbox: "sb2", LabelReplica: "r3"}},
		{ID: "c3", Labels: map[string]string{LabelOwner: "inst-me", LabelSandbox: "sb-held", LabelReplica: "r2"}},
		{ID: "c4", Labels: map[string]string{LabelOwner: "inst-dead2", LabelSandbox: "sb4", LabelReplica: "r2"}},
	}
	var removed []string
	n, err := in.ReapReplica(context.Background(), "r2", found, func(_ context.Context, id string) error {
		removed = append(removed, id)
		return nil
	})
	if err != nil || n != 2 || !slices.Equal(removed, []string{"c1", "c4"}) {
		t.Fatalf("ReapReplica = %d, %v; removed %v, want c1 c4", n, err, removed)
	}
	if n, _ := in.ReapReplica(context.Background(), "", found, nil); n != 0 {
		t.Fatalf("an empty replica reaped %d", n)
	}
}
