package job

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// Config configures a Service. Zero fields take the documented defaults.
type Config struct {
	// Workers is how many jobs run at once. Default 16.
	Workers int
	// QueueSize bounds the jobs accepted but not yet started; a Submit
	// beyond it is ErrQueueFull. Default 1024.
	QueueSize int
	// Ceilings are the operator's maximum limits; a request asking for
	// more is ErrInvalid. A zero field has no ceiling.
	Ceilings runner.Limits
	// Defaults apply to limits a request leaves zero. A zero default with a
	// non-zero ceiling takes the ceiling, so a job never runs above it.
	// Defaults.Timeout defaults to 60s (or the timeout ceiling if lower):
	// in-process tools have no runner default to fall back on.
	Defaults runner.Limits
	// WorkDir holds the job workspaces (WorkDir/<job-id>, removed when the
	// job ends). Default $TMPDIR/sandboxd/work. Created if missing.
	WorkDir string
	// HTTP is passed to in-process tools (http_request).
	HTTP *tools.HTTPOptions
	// RunnerName is recorded on jobs of sandboxed tools and used as the
	// runner metric label. Default: the runner's Name(). In-process tools
	// record "inprocess".
	RunnerName string
	// Logger receives lifecycle logs. Default: discard.
	Logger *slog.Logger
	// Metrics, when nil, are created unregistered.
	Metrics *Metrics
	// EventHistory bounds the events kept per job for Subscribe replay.
	// When full, the oldest output events are dropped (queued, started and
	// finished are always kept). Default 256.
	EventHistory int
}

// RunnerInProcess is the Job.Runner of tools that run inside the daemon.
const RunnerInProcess = "inprocess"

const defaultTimeout = 60 * time.Second

func (c Config) withDefaults(r runner.Runner) (Config, error) {
	if c.Workers == 0 {
		c.Workers = 16
	}
	if c.Workers < 0 {
		return c, fmt.Errorf("config: workers %d must be positive", c.Workers)
	}
	if c.QueueSize == 0 {
		c.QueueSize = 1024
	}
	if c.QueueSize < 0 {
		return c, fmt.Errorf("config: queue size %d must be positive", c.QueueSize)
	}
	if c.EventHistory == 0 {
		c.EventHistory = 256
	}
	if c.EventHistory < 4 {
		return c, fmt.Errorf("config: event history %d must be at least 4", c.EventHistory)
	}
	if c.WorkDir == "" {
		c.WorkDir = filepath.Join(os.TempDir(), "sandboxd", "work")
	}
	if c.RunnerName == "" && r != nil {
		c.RunnerName = r.Name()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Defaults.Timeout == 0 {
		c.Defaults.Timeout = defaultTimeout
		if c.Ceilings.Timeout > 0 && c.Ceilings.Timeout < defaultTimeout {
			c.Defaults.Timeout = c.Ceilings.Timeout
		}
	}
	for _, f := range limitFields(&c.Defaults, &c.Ceilings) {
		if *f.req < 0 || *f.ceil < 0 {
			return c, fmt.Errorf("config: negative %s", f.name)
		}
		if *f.ceil > 0 && *f.req > *f.ceil {
			return c, fmt.Errorf("config: default %s %d exceeds the ceiling %d", f.name, *f.req, *f.ceil)
		}
	}
	return c, nil
}

// limitField pairs one field of a requested (or default) Limits with the
// same field of the ceilings. Durations are compared as int64 nanoseconds.
type limitField struct {
	name      string
	req, ceil *int64
}

func limitFields(req, ceil *runner.Limits) []limitField {
	return []limitField{
		{"memory_bytes", &req.MemoryBytes, &ceil.MemoryBytes},
		{"pids", &req.PIDs, &ceil.PIDs},
		{"cpu_millis", &req.CPUMillis, &ceil.CPUMillis},
		{"timeout", (*int64)(&req.Timeout), (*int64)(&ceil.Timeout)},
		{"output_bytes", &req.OutputBytes, &ceil.OutputBytes},
		{"nofile", &req.NoFile, &ceil.NoFile},
		{"file_size_bytes", &req.FileSize, &ceil.FileSize},
	}
}

// effectiveLimits checks a request's limits against the ceilings and fills
// the zero fields: request, else default, else ceiling, else zero (the
// runner's default).
func (c *Config) effectiveLimits(req runner.Limits) (runner.Limits, error) {
	out := req
	ceil := c.Ceilings
	def := c.Defaults
	fields := limitFields(&out, &ceil)
	defs := limitFields(&def, &def)
	for i, f := range fields {
		v := *f.req
		if v < 0 {
			return runner.Limits{}, fmt.Errorf("%w: limits.%s %s is negative", ErrInvalid, f.name, fmtLimit(f.name, v))
		}
		if *f.ceil > 0 && v > *f.ceil {
			return runner.Limits{}, fmt.Errorf("%w: limits.%s %s exceeds the ceiling %s",
				ErrInvalid, f.name, fmtLimit(f.name, v), fmtLimit(f.name, *f.ceil))
		}
		if v == 0 {
			v = *defs[i].req
		}
		if v == 0 {
			v = *f.ceil
		}
		*f.req = v
	}
	return out, nil
}

func fmtLimit(name string, v int64) string {
	if name == "timeout" {
		return time.Duration(v).String()
	}
	return fmt.Sprint(v)
}
