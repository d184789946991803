package config

import (
	"strings"
	"testing"
)

// store takes sqlite or a postgres URL, from the file, SANDBOXD_STORE or
// --store; a bad value is refused without echoing it (it may hold a
// password).
func TestStoreKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"", true}, {"sqlite", true},
		{"postgres://sandboxd:pw@db.example.com:5432/sandboxd?sslmode=require", true},
		{"postgresql:///sandboxd?host=/run/postgresql", true},
		{"mysql://u:secretpw@example.com/db", false},
		{"postgres://u:secretpw@example.com/%zz", false},
		{"/var/lib/sandboxd/other.db", false},
	} {
		c := Defaults()
		c.DataDir = "/var/lib/sandboxd"
		c.Store = tc.v
		err := c.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("store %q: %v, want ok=%v", tc.v, err, tc.ok)
		}
		if err != nil && strings.Contains(err.Error(), "secretpw") {
			t.Errorf("store %q: the error shows the password: %v", tc.v, err)
		}
	}
	c := Defaults()
	env := map[string]string{"SANDBOXD_STORE": "postgres://a@example.com/x"}
	if err := c.ApplyEnv(func(k string) string { return env[k] }); err != nil || c.Store != env["SANDBOXD_STORE"] {
		t.Fatalf("SANDBOXD_STORE: %v, store %q", err, c.Store)
	}
	if err := c.SetFlag("store", "sqlite"); err != nil || c.Store != "sqlite" {
		t.Fatalf("--store: %v, store %q", err, c.Store)
	}
}

// replica_address is the HOST:PORT forwarded requests go to: a URL (a
// scheme, a path) is refused at start, not at the first forward.
func TestReplicaAddressKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"", true}, {"sandboxd-2:8080", true}, {"10.0.0.7:8080", true}, {"[fd00::7]:8080", true},
		{"http://sandboxd-2:8080", false}, {"sandboxd-2", false}, {":8080", false}, {"sandboxd-2:8080/api", false},
	} {
		c := Defaults()
		c.DataDir = "/var/lib/sandboxd"
		c.ReplicaAddress = tc.v
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("replica_address %q: %v, want ok=%v", tc.v, err, tc.ok)
		}
	}
}
