package builtin

import (
	"testing"

	"github.com/sandboxd/sandboxd/tools"
)

// TestRegister checks the built-ins pass the registry's own validation and
// that their schemas validate arguments as the tools expect.
func TestRegister(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	if err := Register(reg, Options{}); err != nil {
		t.Fatal(err)
	}
	if got := len(reg.Names()); got != len(Tools(Options{})) {
		t.Fatalf("registered %d tools", got)
	}
	for _, alias := range []string{"python", "shell", "file_read"} {
		if _, ok := reg.Lookup(alias); !ok {
			t.Errorf("alias %s does not resolve", alias)
		}
	}
	for _, c := range []struct {
		name, args string
		valid      bool
	}{
		{"calculator", `{"expression":"1+1"}`, true},
		{"calculator", `{"expression":"1+1","extra":1}`, false},
		{"read_file", `{"path":"a","offset":0}`, false},
		{"read_file", `{"path":"a","offset":3,"limit":10}`, true},
		{"python_repl", `{"code":"print(1)","timeout_seconds":0.5}`, false},
		{"http_request", `{"url":"https://example.com","method":"TRACE"}`, false},
		{"http_request", `{"url":"https://example.com","headers":{"X-A":"b"}}`, true},
		{"list_dir", `{}`, true},
	} {
		_, _, _, err := reg.Prepare(tools.Call{Name: c.name, Arguments: []byte(c.args)})
		if (err == nil) != c.valid {
			t.Errorf("%s %s: err %v, want valid=%v", c.name, c.args, err, c.valid)
		}
	}
	if err := Register(nil, Options{}); err == nil {
		t.Error("nil registry accepted")
	}
}
