package job_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
)

// TestLabelBounds: tags and metadata past config.Labels are refused with
// ErrInvalid naming the bound, nothing recorded; within them a job keeps
// its labels (duplicate tags dropped) and the list filters find it.
func TestLabelBounds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *job.Config, _ *harness) {
		c.Labels = config.Labels{MaxTags: 2, MaxTagBytes: 8, MaxMetadataKeys: 1, MaxKeyBytes: 8, MaxValueBytes: 8}
	})
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		tags []string
		md   map[string]string
		want string
	}{
		{"too many tags", []string{"a", "b", "c"}, nil, "labels.max_tags"},
		{"long tag", []string{"123456789"}, nil, "labels.max_tag_bytes"},
		{"empty tag", []string{""}, nil, "empty"},
		{"control", []string{"a\nb"}, nil, "control"},
		{"too many keys", nil, map[string]string{"a": "1", "b": "2"}, "labels.max_metadata_keys"},
		{"long key", nil, map[string]string{"123456789": "1"}, "labels.max_metadata_key_bytes"},
		{"bad key", nil, map[string]string{"a b": "1"}, "only letters"},
		{"long value", nil, map[string]string{"k": "123456789"}, "labels.max_metadata_value_bytes"},
	} {
		req := call("add", `{"a":1,"b":2}`)
		req.Tags, req.Metadata = tc.tags, tc.md
		if _, _, err := h.svc.Submit(ctx, "acme", req); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Submit: %v, want ErrInvalid naming %q", tc.name, err, tc.want)
		}
		if _, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{Tags: tc.tags, Metadata: tc.md}); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%s: CreateSession: %v, want ErrInvalid", tc.name, err)
		}
		if _, _, err := h.svc.List(ctx, "acme", job.ListFilter{LabelFilter: job.LabelFilter{Tags: tc.tags, Metadata: tc.md}}); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%s: List: %v, want ErrInvalid", tc.name, err)
		}
	}
	if jobs, _, _ := h.svc.List(ctx, "acme", job.ListFilter{}); len(jobs) != 0 {
		t.Fatalf("refused submits recorded %d jobs", len(jobs))
	}
	req := call("add", `{"a":1,"b":2}`)
	req.Tags, req.Metadata = []string{"run", "x", "run"}, map[string]string{"trace:id": "t-1"}
	j := h.submit(t, "acme", req)
	if !slices.Equal(j.Tags, []string{"run", "x"}) || j.Metadata["trace:id"] != "t-1" {
		t.Fatalf("job labels %q %v", j.Tags, j.Metadata)
	}
	done := h.wait(t, "acme", j.ID)
	if !slices.Equal(done.Tags, j.Tags) || done.Metadata["trace:id"] != "t-1" {
		t.Fatalf("finished job lost its labels: %q %v", done.Tags, done.Metadata)
	}
	jobs, _, err := h.svc.List(ctx, "acme", job.ListFilter{LabelFilter: job.LabelFilter{Tags: []string{"x"}, Metadata: map[string]string{"trace:id": "t-1"}}})
	if err != nil || len(jobs) != 1 || jobs[0].ID != j.ID {
		t.Fatalf("filtered list: %v %v", jobs, err)
	}
}
