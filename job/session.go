package job

import (
	"maps"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// SessionState of a session: creating → active → closed, or creating →
// failed when its sandbox could not be created.
type SessionState string

const (
	SessionCreating SessionState = "creating"
	SessionActive   SessionState = "active"
	SessionClosed   SessionState = "closed"
	SessionFailed   SessionState = "failed"
)

// Reasons recorded on closed or failed sessions.
const (
	SessionReasonDeleted  = "deleted"  // a client deleted it
	SessionReasonExpired  = "expired"  // its TTL passed
	SessionReasonIdle     = "idle"     // unused for longer than its idle timeout
	SessionReasonLost     = "lost"     // the daemon died while it was active
	SessionReasonShutdown = "shutdown" // the daemon shut down
	SessionReasonCreate   = "create_failed"
)

// Session is a persistent sandbox that runs the jobs submitted with its ID,
// one at a time, and keeps its workspace between them.
type Session struct {
	ID      string         `json:"id"`
	Tenant  string         `json:"tenant"`
	Image   string         `json:"image,omitempty"`
	Effects []tools.Effect `json:"effects"`
	Limits  runner.Limits  `json:"limits"`
	State   SessionState   `json:"state"`
	Reason  string         `json:"reason,omitempty"`
	// TTL and IdleTimeout are the lifetimes asked for (0: none for idle).
	TTL         time.Duration `json:"ttl"`
	IdleTimeout time.Duration `json:"idle_timeout"`
	CreatedAt   time.Time     `json:"created_at"`
	ExpiresAt   time.Time     `json:"expires_at"`
	LastUsedAt  time.Time     `json:"last_used_at"`
	ClosedAt    *time.Time    `json:"closed_at,omitempty"`
	// Tags and Metadata are the client's labels (labels.go).
	Tags     []string          `json:"tags,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Sandbox is the ID of the session's sandbox while this process holds
	// it open (not stored: another replica's, or a closed, session has none).
	Sandbox string `json:"sandbox,omitempty"`
}

// SessionRequest asks for a session. Zero fields take the service's
// session defaults; Limits may ask for anything up to the ceilings, like a
// job's (config.Limits.Resolve).
type SessionRequest struct {
	// Image is "" for the runner's default, or one of the images the
	// operator allows the tenant (Config.Images); stored in the runner's
	// canonical spelling.
	Image       string
	Effects     []tools.Effect
	Limits      runner.Limits
	TTL         time.Duration
	IdleTimeout time.Duration
	// Tags and Metadata label the session (bounded by Config.Labels).
	Tags     []string
	Metadata map[string]string
}

// SessionFilter selects a tenant's sessions, newest first.
type SessionFilter struct {
	State SessionState
	// LabelFilter keeps the sessions with every tag and metadata pair
	// named.
	LabelFilter
	Limit  int
	Cursor string
}

// DefaultSessionEffects are a session's effects when the request names none.
var DefaultSessionEffects = []tools.Effect{tools.EffectExec, tools.EffectFileRead, tools.EffectFileWrite}

func cloneSession(s *Session) *Session {
	if s == nil {
		return nil
	}
	c := *s
	c.Effects = slices.Clone(s.Effects)
	c.Tags = slices.Clone(s.Tags)
	c.Metadata = maps.Clone(s.Metadata)
	if s.ClosedAt != nil {
		t := *s.ClosedAt
		c.ClosedAt = &t
	}
	return &c
}

// allows reports the first effect of want the session does not have.
func (s *Session) allows(want []tools.Effect) (tools.Effect, bool) {
	for _, e := range want {
		if !slices.Contains(s.Effects, e) {
			return e, false
		}
	}
	return "", true
}
