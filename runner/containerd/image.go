package containerd

import (
	"context"
	"fmt"
	"os"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
)

// normalizeRef turns "sandboxd/python:latest" into the name containerd
// stores ("docker.io/sandboxd/python:latest"), as docker and ctr import do.
func normalizeRef(ref string) string {
	if n, err := hostside.CanonicalImageRef(ref); err == nil {
		return n
	}
	return ref
}

// image returns an image of the runner's namespace unpacked in its
// snapshotter (unpacking it once if needed). A missing image is
// runner.ErrInvalidSpec: images are imported ahead (scripts/containerd-setup.sh
// or ImportArchive), never pulled.
func (r *Runner) image(ctx context.Context, ref string) (client.Image, error) {
	name := normalizeRef(ref)
	r.mu.Lock()
	img, ok := r.images[name]
	r.mu.Unlock()
	if ok {
		return img, nil
	}
	img, err := r.c.GetImage(ctx, name)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("image %q not in containerd namespace %s (import it: scripts/containerd-setup.sh): %w: %w", ref, r.cfg.Namespace, runner.ErrInvalidSpec, err)
		}
		return nil, r.wrap("get image "+name, err)
	}
	unpacked, err := img.IsUnpacked(ctx, r.cfg.Snapshotter)
	if err != nil {
		return nil, r.wrap("check image "+name, err)
	}
	if !unpacked {
		if err := img.Unpack(ctx, r.cfg.Snapshotter); err != nil {
			return nil, r.wrap("unpack image "+name, err)
		}
	}
	r.mu.Lock()
	r.images[name] = img
	r.mu.Unlock()
	return img, nil
}

// forgetImage drops a cached image, so the next Create looks it up again.
func (r *Runner) forgetImage(ref string) {
	r.mu.Lock()
	delete(r.images, normalizeRef(ref))
	r.mu.Unlock()
}

// ImportArchive imports an image archive (docker save or OCI layout tar,
// as scripts/build-images.sh --oci writes) into namespace of the
// containerd at address and unpacks it into snapshotter. It returns the
// image names.
func ImportArchive(ctx context.Context, address, namespace, snapshotter, path string) ([]string, error) {
	c, err := client.New(address, client.WithDefaultNamespace(namespace))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	imgs, err := c.Import(ctx, f, client.WithImageRefTranslator(normalizeRef))
	if err != nil {
		return nil, fmt.Errorf("containerd: import %s: %w", path, err)
	}
	var names []string
	for _, im := range imgs {
		img := client.NewImage(c, im)
		if err := img.Unpack(ctx, snapshotter); err != nil {
			return names, fmt.Errorf("containerd: unpack %s: %w", im.Name, err)
		}
		names = append(names, im.Name)
	}
	return names, nil
}

// runcOptions makes the runc v2 shim run binary (the runsc wrapper)
// instead of runc.
func runcOptions(binary string) *options.Options {
	return &options.Options{BinaryName: binary}
}
