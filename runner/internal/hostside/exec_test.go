package hostside

import "testing"

func TestSignalName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "", "killed": "SIGKILL", "SIGTERM": "SIGTERM", "terminated": "SIGTERM", "9": "SIGKILL"} {
		if got := signalName(in); got != want {
			t.Errorf("signalName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRecap(t *testing.T) {
	t.Parallel()
	in := []byte("HEAD" + string(make([]byte, 5000)) + "TAIL")
	out, tr := recap(in, false, 100)
	if !tr || len(out) > 200 || string(out[:4]) != "HEAD" || string(out[len(out)-4:]) != "TAIL" {
		t.Fatalf("recap = %q, %v", out, tr)
	}
	if out, tr := recap([]byte("small"), false, 100); string(out) != "small" || tr {
		t.Fatalf("recap small = %q, %v", out, tr)
	}
}
