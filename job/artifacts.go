package job

import (
	"context"
	"fmt"
	"mime"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/tools"
)

const (
	// maxArtifacts and maxArtifactBytes cap what one job may store; the
	// REPL agent already caps a cell's artifacts at 4 MiB.
	maxArtifacts     = 32
	maxArtifactBytes = 16 << 20
	// maxArtifactName bounds an artifact's name (a URL path segment).
	maxArtifactName = 100
	// maxErrorBytes caps a result's Error in the stored record.
	maxErrorBytes = 64 << 10
)

// ArtifactURL is where a job's artifact is served.
func ArtifactURL(jobID, name string) string {
	return "/v1/jobs/" + jobID + "/artifacts/" + name
}

// keepArtifacts stores the result's artifacts apart from the job and
// leaves references in the result: name, mime type, size and URL, never
// the data. Names come from sandboxed code: anything but a plain file name
// is replaced, duplicates get a suffix. Past maxArtifacts or
// maxArtifactBytes, or refused by the store, an artifact is dropped and
// the result says so to the program (not the model: Content is kept).
func (s *Service) keepArtifacts(j *Job, res *tools.Result) {
	if len(res.Artifacts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	kept := make([]tools.Artifact, 0, len(res.Artifacts))
	used := make(map[string]bool)
	var total int64
	for i, a := range res.Artifacts {
		a.Size = int64(len(a.Data))
		if a.MimeType == "" {
			a.MimeType = "application/octet-stream"
		}
		a.Name = uniqueName(artifactName(a.Name, a.MimeType, i), used)
		if len(kept) >= maxArtifacts || total+a.Size > maxArtifactBytes {
			s.sm.artifactsDropped.Inc()
			s.log.Warn("artifact over the job's cap dropped", "job", j.ID, "artifact", a.Name, "bytes", a.Size)
			continue
		}
		if err := s.st.PutArtifact(ctx, j.ID, a); err != nil {
			s.sm.artifactsDropped.Inc()
			s.log.Error("store artifact", "job", j.ID, "artifact", a.Name, "err", err)
			continue
		}
		total += a.Size
		used[a.Name] = true
		a.Data, a.URL = nil, ArtifactURL(j.ID, a.Name)
		kept = append(kept, a)
	}
	res.Artifacts = kept
}

// artifactName returns name when it is a plain file name ([A-Za-z0-9._-],
// not starting with a dot), else artifact-<i> with the mime type's
// extension.
func artifactName(name, mimeType string, i int) string {
	ok := name != "" && len(name) <= maxArtifactName && name[0] != '.'
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			ok = false
			break
		}
	}
	if ok {
		return name
	}
	ext, ok := commonExt[mimeType]
	if !ok {
		if exts, _ := mime.ExtensionsByType(mimeType); len(exts) > 0 {
			ext = exts[0]
		}
	}
	return fmt.Sprintf("artifact-%d%s", i+1, ext)
}

var commonExt = map[string]string{
	"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/svg+xml": ".svg",
	"text/plain": ".txt", "text/csv": ".csv", "text/html": ".html", "application/json": ".json",
	"application/pdf": ".pdf", "application/octet-stream": ".bin",
}

func uniqueName(name string, used map[string]bool) string {
	if !used[name] {
		return name
	}
	base, ext := name, ""
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		base, ext = name[:i], name[i:]
	}
	for n := 2; ; n++ {
		if c := fmt.Sprintf("%s-%d%s", base, n, ext); !used[c] {
			return c
		}
	}
}

// Artifact returns a tenant's job artifact with its data; another
// tenant's job, or no such artifact, is ErrNotFound.
func (s *Service) Artifact(ctx context.Context, tenant, jobID, name string) (*tools.Artifact, error) {
	if _, err := s.Get(ctx, tenant, jobID); err != nil {
		return nil, err
	}
	return s.st.GetArtifact(ctx, jobID, name)
}

// boundResult caps what a terminal record keeps of a result: Content at
// twice the output cap (stdout and stderr each within it, as the runner
// caps them) and each process stream at the cap, head and tail kept with
// the runner's marker between; Error at maxErrorBytes. Runner output is
// already within these bounds; in-process tools and REPL values may not
// be.
func boundResult(res *tools.Result, streamCap int64) {
	if streamCap <= 0 {
		streamCap = defaultStreamBytes
	}
	if capText(&res.Content, 2*streamCap+4096) {
		res.Truncated = true
	}
	capText(&res.Error, maxErrorBytes)
	if p := res.Process; p != nil {
		if capText(&p.Stdout, streamCap+4096) || capText(&p.Stderr, streamCap+4096) {
			p.OutputTruncated, res.Truncated = true, true
		}
	}
}

// capText cuts *s to at most limit bytes plus the marker, keeping its
// first and last half on rune boundaries; it reports whether it cut.
func capText(s *string, limit int64) bool {
	if int64(len(*s)) <= limit {
		return false
	}
	t := *s
	head, tail := int(limit-limit/2), len(t)-int(limit/2)
	for head > 0 && !utf8.RuneStart(t[head]) {
		head--
	}
	for tail < len(t) && !utf8.RuneStart(t[tail]) {
		tail++
	}
	*s = t[:head] + fmt.Sprintf("\n[... %d bytes truncated ...]\n", tail-head) + t[tail:]
	return true
}
