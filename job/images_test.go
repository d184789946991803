package job_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/fake"
	"github.com/sandboxd/sandboxd/store"
)

// imageRunner is the fake runner naming images the way the container
// runners do (a short reference and its fully qualified form are one
// image), recording the image of every Create.
type imageRunner struct {
	*fake.Runner
	mu      sync.Mutex
	created []string
}

func (r *imageRunner) DefaultImage() string { return "docker.io/sandboxd/python:latest" }

func (r *imageRunner) CanonicalImage(img string) (string, error) {
	if img == "" || strings.ToLower(img) != img || strings.ContainsAny(img, " \t\n") {
		return "", fmt.Errorf("image %q is not a valid image reference: %w", img, runner.ErrInvalidSpec)
	}
	if !strings.Contains(img, ":") {
		img += ":latest"
	}
	if !strings.HasPrefix(img, "docker.io/") {
		img = "docker.io/" + img
	}
	return img, nil
}

func (r *imageRunner) Create(ctx context.Context, spec runner.SandboxSpec) (runner.Sandbox, error) {
	r.mu.Lock()
	r.created = append(r.created, spec.Image)
	r.mu.Unlock()
	return r.Runner.Create(ctx, spec)
}

func (r *imageRunner) images() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.created...)
}

// TestSessionImages is issue 9 item 6: a session may run the runner's
// default image or one the operator lists for its tenant, nothing else; a
// refused or malformed image is ErrInvalid (400) naming the allowed ones,
// and neither the runner nor the store hears of it.
func TestSessionImages(t *testing.T) {
	t.Parallel()
	r := &imageRunner{Runner: fake.New()}
	h := newSessHarness(t, r, job.Config{Images: map[string][]string{"acme": {"sandboxd/data:1", "sandboxd/python"}}})
	ctx := t.Context()
	for _, tc := range []struct {
		tenant, image, want string
	}{
		{"acme", "", ""},
		{"acme", "sandboxd/python", "docker.io/sandboxd/python:latest"},
		{"acme", "docker.io/sandboxd/python:latest", "docker.io/sandboxd/python:latest"},
		{"acme", "sandboxd/data:1", "docker.io/sandboxd/data:1"},
		{"other", "sandboxd/python:latest", "docker.io/sandboxd/python:latest"},
		{"other", "", ""},
	} {
		s, err := h.svc.CreateSession(ctx, tc.tenant, job.SessionRequest{Image: tc.image})
		if err != nil {
			t.Fatalf("%s %q: %v", tc.tenant, tc.image, err)
		}
		if s.Image != tc.want {
			t.Errorf("%s %q: session image %q, want %q", tc.tenant, tc.image, s.Image, tc.want)
		}
		if got := r.images(); got[len(got)-1] != tc.want {
			t.Errorf("%s %q: runner asked for %q", tc.tenant, tc.image, got[len(got)-1])
		}
		if _, err := h.svc.CloseSession(ctx, tc.tenant, s.ID); err != nil {
			t.Fatal(err)
		}
	}
	creates := len(r.images())
	before, _, err := h.svc.ListSessions(ctx, "acme", job.SessionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tenant, image string
		want          []string
	}{
		{"acme", "sandboxd/debian:bookworm", []string{`image "sandboxd/debian:bookworm" is not allowed for tenant "acme"`,
			"docker.io/sandboxd/python:latest, docker.io/sandboxd/data:1"}},
		{"acme", "debian", []string{"not allowed"}},
		{"acme", "sandboxd/data:2", []string{"not allowed"}},
		{"other", "sandboxd/data:1", []string{`not allowed for tenant "other"; allowed images are docker.io/sandboxd/python:latest (omit`}},
		{"acme", "Not A Reference", []string{`image "Not A Reference" is not a valid image reference`, "allowed images are docker.io/sandboxd/python:latest, docker.io/sandboxd/data:1"}},
		{"acme", "/", []string{"not allowed"}},
	} {
		_, err := h.svc.CreateSession(ctx, tc.tenant, job.SessionRequest{Image: tc.image})
		if !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%s %q: %v, want ErrInvalid", tc.tenant, tc.image, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %q: %q lacks %q", tc.tenant, tc.image, err, w)
			}
		}
		if strings.Contains(err.Error(), runner.ErrInvalidSpec.Error()) {
			t.Errorf("%q leaks the runner's sentinel", err)
		}
	}
	if n := len(r.images()); n != creates {
		t.Errorf("the runner was asked for %d sandboxes for refused images", n-creates)
	}
	after, _, err := h.svc.ListSessions(ctx, "acme", job.SessionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("refused sessions were recorded: %d -> %d", len(before), len(after))
	}
}

func TestSessionImagesConfig(t *testing.T) {
	t.Parallel()
	st, err := store.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = job.New(job.Config{WorkDir: t.TempDir(), Images: map[string][]string{"acme": {"ok", "Bad Ref"}, "bob": {""}}},
		st, sessionTools(t), &imageRunner{Runner: fake.New()})
	if err == nil || !strings.Contains(err.Error(), `images of tenant "acme" [1]: image "Bad Ref"`) || !strings.Contains(err.Error(), `tenant "bob" [0]: empty image`) {
		t.Fatalf("bad images: %v", err)
	}
}
