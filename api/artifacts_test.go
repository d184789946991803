package api

import (
	"testing"

	"github.com/sandboxd/sandboxd/tools"
)

// TestArtifactByURL: the job's result references the artifact (no data);
// its URL serves the bytes with the mime type, to the owning tenant only.
func TestArtifactByURL(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Keys: map[string]string{"key-alice": "alice", "key-bob": "bob"}})
	alice, bob := "Authorization: Bearer key-alice", "Authorization: Bearer key-bob"
	rec := h.do("POST", "/v1/jobs", `{"tool":"a"}`, alice)
	id := decodeJob(t, rec.Body.String()).ID
	png := []byte("\x89PNG\r\n\x1a\nfake")
	h.fake.Finish(id, &tools.Result{OK: true, Artifacts: []tools.Artifact{
		{Name: "figure-1.png", MimeType: "image/png", Data: png},
		{Name: "page.html", MimeType: "text/html", Data: []byte("<script>alert(1)</script>")},
	}})

	rec = h.do("GET", "/v1/jobs/"+id, "", alice)
	j := decodeJob(t, rec.Body.String())
	if j.Result == nil || len(j.Result.Artifacts) != 2 {
		t.Fatalf("job %s", rec.Body)
	}
	a := j.Result.Artifacts[0]
	if a.Name != "figure-1.png" || a.MimeType != "image/png" || a.Size != int64(len(png)) || len(a.Data) != 0 ||
		a.URL != "/v1/jobs/"+id+"/artifacts/figure-1.png" {
		t.Fatalf("artifact reference %+v", a)
	}

	rec = h.do("GET", a.URL, "", alice)
	if rec.Code != 200 || rec.Body.String() != string(png) || rec.Header().Get("Content-Type") != "image/png" ||
		rec.Header().Get("X-Content-Type-Options") != "nosniff" || rec.Header().Get("Content-Disposition") != "" {
		t.Fatalf("GET %s: %d %v %q", a.URL, rec.Code, rec.Header(), rec.Body)
	}
	rec = h.do("GET", j.Result.Artifacts[1].URL, "", alice)
	if rec.Code != 200 || rec.Header().Get("Content-Disposition") != `attachment; filename=page.html` ||
		rec.Header().Get("Content-Security-Policy") == "" {
		t.Fatalf("html artifact not an attachment: %d %v", rec.Code, rec.Header())
	}
	for _, tc := range []struct{ name, url, key string }{
		{"other tenant", a.URL, bob},
		{"no such artifact", "/v1/jobs/" + id + "/artifacts/nope.png", alice},
		{"no such job", "/v1/jobs/job_nope/artifacts/figure-1.png", alice},
	} {
		if rec := h.do("GET", tc.url, "", tc.key); rec.Code != 404 || decodeErr(t, rec.Body.String()).Code != CodeNotFound {
			t.Errorf("%s: %d %s", tc.name, rec.Code, rec.Body)
		}
	}
}
