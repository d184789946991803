package job

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/runner"
)

// imagePolicy holds the images each tenant's sessions may name
// (Config.Images), in the runner's canonical spelling.
type imagePolicy struct {
	namer runner.ImageNamer // nil: the runner names no images; compare as written
	def   string            // the runner's default image ("" unnamed)
	extra map[string][]string
}

func newImagePolicy(r runner.Runner, images map[string][]string) (*imagePolicy, error) {
	p := &imagePolicy{extra: map[string][]string{}}
	if n, ok := r.(runner.ImageNamer); ok {
		p.namer, p.def = n, n.DefaultImage()
	}
	tenants := make([]string, 0, len(images))
	for t := range images {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	var errs []error
	for _, t := range tenants {
		for i, img := range images[t] {
			c, err := p.canonical(img)
			if err != nil {
				errs = append(errs, fmt.Errorf("images of tenant %q [%d]: %v", t, i, err))
				continue
			}
			if c != p.def && !slices.Contains(p.extra[t], c) {
				p.extra[t] = append(p.extra[t], c)
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("config: %w", errors.Join(errs...))
	}
	return p, nil
}

func (p *imagePolicy) canonical(img string) (string, error) {
	if img == "" {
		return "", errors.New("empty image")
	}
	if p.namer == nil {
		return img, nil
	}
	return p.namer.CanonicalImage(img)
}

// allowed lists the images tenant may name, the runner's default first.
func (p *imagePolicy) allowed(tenant string) []string {
	var out []string
	if p.def != "" {
		out = append(out, p.def)
	}
	return append(out, p.extra[tenant]...)
}

// check returns the image a session of tenant runs when it asks for img:
// "" (the runner's default) for "", else img in canonical form when the
// operator allows it. A malformed image or one not allowed is ErrInvalid
// naming the allowed ones; nothing asks the runner's daemon.
func (p *imagePolicy) check(tenant, img string) (string, error) {
	if img == "" {
		return "", nil
	}
	c, err := p.canonical(img)
	if err != nil {
		return "", fmt.Errorf("%w: %s; %s", ErrInvalid, strings.TrimSuffix(err.Error(), ": "+runner.ErrInvalidSpec.Error()), p.describe(tenant))
	}
	if c == p.def || slices.Contains(p.extra[tenant], c) {
		return c, nil
	}
	return "", fmt.Errorf("%w: image %q is not allowed for tenant %q; %s", ErrInvalid, img, tenant, p.describe(tenant))
}

// describe names the images tenant may use, for error messages.
func (p *imagePolicy) describe(tenant string) string {
	names := "none but the runner's default"
	if allowed := p.allowed(tenant); len(allowed) > 0 {
		names = strings.Join(allowed, ", ")
	}
	return "allowed images are " + names + " (omit image for the runner's default)"
}
