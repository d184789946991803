package job

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// What a sandbox image holds (Python and its packages) is probed once per
// image by running a short script in a sandbox of it, so that a tool's
// description can say what is true there (tools.Where). The probe runs
// when a caller first asks for a description in a place (GET
// /v1/tools), never at start-up; until it has answered, descriptions
// promise only the standard library.

// probedPackages are the Python packages the probe looks for: import name
// and distribution name (for the version).
var probedPackages = [][2]string{
	{"numpy", "numpy"}, {"pandas", "pandas"}, {"matplotlib", "matplotlib"}, {"scipy", "scipy"},
	{"sympy", "sympy"}, {"sklearn", "scikit-learn"}, {"PIL", "Pillow"}, {"requests", "requests"},
}

// probeScript prints the facts as JSON; it looks packages up without
// importing them (find_spec, metadata).
const probeScript = `import json, sys, importlib.util, importlib.metadata as md
out = {"python": "%d.%d.%d" % sys.version_info[:3], "packages": {}, "missing": []}
for mod, dist in json.loads(sys.argv[1]):
    if importlib.util.find_spec(mod) is None:
        out["missing"].append(mod)
        continue
    try:
        v = md.version(dist)
    except Exception:
        v = ""
    out["packages"][mod] = v
print(json.dumps(out))
`

const (
	// imageFactsTTL is how long a probe's answer is kept (an image tag
	// may be rebuilt); a failed probe is retried after imageFactsRetry.
	imageFactsTTL   = 10 * time.Minute
	imageFactsRetry = time.Minute
	// imageProbeTimeout bounds one probe (creating a container included).
	imageProbeTimeout = 60 * time.Second
)

type imageFactsEntry struct {
	facts *tools.ImageFacts // nil: failed or running
	at    time.Time
	done  chan struct{} // closed when the probe has answered
}

type imageFactsCache struct {
	mu sync.Mutex
	m  map[string]*imageFactsEntry
}

// ImageFacts returns what image ("" the runner's default) holds, probing
// it when not known: it waits for the probe until ctx ends, then returns
// nil (unknown) while the probe goes on for the next caller.
func (s *Service) ImageFacts(ctx context.Context, image string) *tools.ImageFacts {
	if s.r == nil {
		return nil
	}
	c := &s.imageFacts
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*imageFactsEntry{}
	}
	e := c.m[image]
	if e != nil {
		select {
		case <-e.done:
			if ttl := imageFactsRetry; e.facts != nil && time.Since(e.at) < imageFactsTTL || e.facts == nil && time.Since(e.at) < ttl {
				c.mu.Unlock()
				return e.facts
			}
			e = nil // stale: probe again
		default:
		}
	}
	if e == nil {
		e = &imageFactsEntry{done: make(chan struct{})}
		c.m[image] = e
		go func() {
			pctx, cancel := context.WithTimeout(context.Background(), imageProbeTimeout)
			defer cancel()
			f, err := s.probeImage(pctx, image)
			if err != nil {
				s.log.Warn("probe sandbox image", "image", image, "err", err)
			}
			c.mu.Lock()
			e.facts, e.at = f, time.Now()
			c.mu.Unlock()
			close(e.done)
		}()
	}
	c.mu.Unlock()
	select {
	case <-e.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return e.facts
	case <-ctx.Done():
		return nil
	}
}

func (s *Service) probeImage(ctx context.Context, image string) (*tools.ImageFacts, error) {
	pk, _ := json.Marshal(probedPackages)
	res, err := s.RunCommand(ctx, tools.Command{
		Args: []string{"/usr/bin/python3", "-I", "-B", "-c", probeScript, string(pk)},
		Env:  []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/tmp"},
		Dir:  "/",
		// The probe is the daemon's own: a short, fixed limit.
		Timeout: 30 * time.Second,
	}, []tools.Effect{tools.EffectExec}, image)
	if err != nil {
		return nil, err
	}
	if !res.OK {
		if res.Process != nil && res.Process.ExitCode == 127 || strings.Contains(res.Content, "No such file") {
			return &tools.ImageFacts{}, nil // no python3 in the image
		}
		return nil, errors.New("probe failed: " + res.Error + ": " + res.Content)
	}
	var f tools.ImageFacts
	if err := json.Unmarshal([]byte(strings.TrimSpace(res.Content)), &f); err != nil {
		return nil, errors.New("probe answered no JSON: " + err.Error())
	}
	return &f, nil
}

// ToolsWhere is where a tenant's calls run, for tool descriptions: in the
// session sessionID (its image), or one-shot in the runner's default
// image. A session of another tenant is ErrSessionNotFound. It waits for
// an image probe until ctx ends.
func (s *Service) ToolsWhere(ctx context.Context, tenant, sessionID string) (tools.Where, error) {
	if sessionID == "" {
		return tools.Where{OneShot: true, Image: s.ImageFacts(ctx, "")}, nil
	}
	ses, err := s.GetSession(ctx, tenant, sessionID)
	if err != nil {
		return tools.Where{}, err
	}
	return tools.Where{Session: true, Image: s.ImageFacts(ctx, ses.Image)}, nil
}
