package config

import (
	"strings"
	"testing"
)

// tenants[].weight and max_running: decoded, checked, and handed to the
// job service by TenantShares.
func TestTenantShares(t *testing.T) {
	c := Defaults()
	c.DataDir = "/var/lib/sandboxd"
	y := `
tenants:
  - name: gold
    api_keys: [k1]
    weight: 300
    max_running: 4
  - name: plain
    api_keys: [k2]
queue: {tenant_max_running: 6}
`
	if err := Decode([]byte(y), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	sh := c.TenantShares()
	if len(sh) != 1 || sh["gold"] != (TenantShare{Weight: 300, MaxRunning: 4}) {
		t.Fatalf("shares %+v", sh)
	}
	if got := c.Queue.TenantCap(len(c.Tenants)); got != 6 {
		t.Fatalf("cap %d", got)
	}
	c.Tenants[0].Weight = 20000
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "weight 20000") {
		t.Fatalf("weight 20000: %v", err)
	}
	c.Tenants[0].Weight, c.Tenants[0].MaxRunning = 100, -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "max_running") {
		t.Fatalf("max_running -1: %v", err)
	}
}
