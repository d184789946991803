package local

import (
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/runner"
)

func TestCanonicalImage(t *testing.T) {
	t.Parallel()
	r := &Runner{cfg: Config{Rootfs: "/srv/rootfs"}}
	if d := r.DefaultImage(); d != "/srv/rootfs" {
		t.Errorf("DefaultImage = %q", d)
	}
	for in, want := range map[string]string{"/srv/rootfs": "/srv/rootfs", "/srv//rootfs/": "/srv/rootfs", "/srv/x/../rootfs": "/srv/rootfs", "/": "/"} {
		if got, err := r.CanonicalImage(in); err != nil || got != want {
			t.Errorf("CanonicalImage(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "rootfs", "./rootfs", "sandboxd/python:latest", "/a\x00b"} {
		if _, err := r.CanonicalImage(bad); !errors.Is(err, runner.ErrInvalidSpec) {
			t.Errorf("CanonicalImage(%q) = %v, want ErrInvalidSpec", bad, err)
		}
	}
}
