package store

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
)

// TestLabels: tags and metadata round-trip on jobs and sessions, survive
// an Update, and the list filters keep only the records carrying every
// tag and metadata pair named (a key or value spelled like SQL or a JSON
// path is just data).
func TestLabels(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	ctx := t.Context()
	odd := `x' OR 1=1 --`
	for i, lab := range []struct {
		tags []string
		md   map[string]string
	}{
		{[]string{"langchain", "prod"}, map[string]string{"run_id": "r1", "trace.id": "t1"}},
		{[]string{"langchain"}, map[string]string{"run_id": "r2"}},
		{[]string{"crewai", odd}, map[string]string{"$.run_id": "r1", "a\"b": odd}},
		{nil, nil},
	} {
		j := newJob("j"+string(rune('0'+i)), "acme", base.Add(time.Duration(i)*time.Second))
		j.Tags, j.Metadata = lab.tags, lab.md
		if err := s.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, j.ID)
		if err != nil || !reflect.DeepEqual(got.Tags, lab.tags) || !reflect.DeepEqual(got.Metadata, lab.md) {
			t.Fatalf("job %d: tags %q metadata %v err %v; want %q %v", i, got.Tags, got.Metadata, err, lab.tags, lab.md)
		}
		ss := newSession("s"+string(rune('0'+i)), "acme", base.Add(time.Duration(i)*time.Second))
		ss.Tags, ss.Metadata = lab.tags, lab.md
		if err := s.CreateSession(ctx, ss); err != nil {
			t.Fatal(err)
		}
		gs, err := s.GetSession(ctx, ss.ID)
		if err != nil || !reflect.DeepEqual(gs.Tags, lab.tags) || !reflect.DeepEqual(gs.Metadata, lab.md) {
			t.Fatalf("session %d: tags %q metadata %v err %v", i, gs.Tags, gs.Metadata, err)
		}
	}
	// Another tenant's matching job stays out.
	other := newJob("x", "globex", base)
	other.Tags = []string{"langchain"}
	if err := s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	j, _ := s.Get(ctx, "j1")
	j.State = job.StateSucceeded
	if err := s.Update(ctx, j); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, "j1"); !slices.Equal(got.Tags, []string{"langchain"}) || got.Metadata["run_id"] != "r2" {
		t.Fatalf("after Update: %q %v", got.Tags, got.Metadata)
	}

	for _, tc := range []struct {
		name string
		f    job.LabelFilter
		want []string // newest first, without the prefix
	}{
		{"none", job.LabelFilter{}, []string{"3", "2", "1", "0"}},
		{"tag", job.LabelFilter{Tags: []string{"langchain"}}, []string{"1", "0"}},
		{"two tags", job.LabelFilter{Tags: []string{"langchain", "prod"}}, []string{"0"}},
		{"metadata", job.LabelFilter{Metadata: map[string]string{"run_id": "r1"}}, []string{"0"}},
		{"dotted key", job.LabelFilter{Metadata: map[string]string{"trace.id": "t1"}}, []string{"0"}},
		{"path-like key", job.LabelFilter{Metadata: map[string]string{"$.run_id": "r1"}}, []string{"2"}},
		{"quoted", job.LabelFilter{Tags: []string{odd}, Metadata: map[string]string{"a\"b": odd}}, []string{"2"}},
		{"tag and metadata", job.LabelFilter{Tags: []string{"langchain"}, Metadata: map[string]string{"run_id": "r2"}}, []string{"1"}},
		{"no match", job.LabelFilter{Tags: []string{"langchain"}, Metadata: map[string]string{"run_id": "nope"}}, nil},
		{"value is not a key", job.LabelFilter{Tags: []string{"run_id"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs, _, err := s.List(ctx, "acme", job.ListFilter{LabelFilter: tc.f})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, j := range jobs {
				got = append(got, j.ID[1:])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("jobs %v, want %v", got, tc.want)
			}
			sessions, _, err := s.ListSessions(ctx, "acme", job.SessionFilter{LabelFilter: tc.f})
			if err != nil {
				t.Fatal(err)
			}
			got = nil
			for _, ss := range sessions {
				got = append(got, ss.ID[1:])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("sessions %v, want %v", got, tc.want)
			}
		})
	}
}
