package hostside

import (
	"fmt"

	"github.com/distribution/reference"

	"github.com/sandboxd/sandboxd/runner"
)

// CanonicalImageRef is the container runners' runner.ImageNamer check: ref
// parsed as a Docker image reference and written in its fully qualified
// form ("sandboxd/python" and "docker.io/sandboxd/python:latest" are the
// same image). A malformed reference (upper case, bad characters, an empty
// or over-long name) wraps runner.ErrInvalidSpec. The daemon is not asked:
// whether the image exists is Create's business.
func CanonicalImageRef(ref string) (string, error) {
	n, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", fmt.Errorf("image %q is not a valid image reference: %v: %w", ref, err, runner.ErrInvalidSpec)
	}
	return n.String(), nil
}

// ImageNames is the container runners' runner.ImageNamer, embedded in
// their Runner: Default is the configured image.
type ImageNames struct{ Default string }

// DefaultImage implements runner.ImageNamer: the configured image, in its
// canonical form when it parses.
func (n ImageNames) DefaultImage() string {
	if c, err := CanonicalImageRef(n.Default); err == nil {
		return c
	}
	return n.Default
}

// CanonicalImage implements runner.ImageNamer (CanonicalImageRef).
func (ImageNames) CanonicalImage(image string) (string, error) { return CanonicalImageRef(image) }
