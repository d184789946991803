package config

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sandboxd/sandboxd/policy"
)

// UnmarshalText reads SANDBOXD_API_KEYS: "key1:tenantA,key2:tenantB" (a
// key without ":tenant" belongs to DefaultTenant). It replaces the file's
// tenants (and their policies).
func (ts *Tenants) UnmarshalText(text []byte) error {
	var tenants Tenants
	index := map[string]int{}
	for item := range strings.SplitSeq(string(text), ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, tenant := item, DefaultTenant
		if i := strings.LastIndex(item, ":"); i >= 0 {
			key, tenant = item[:i], item[i+1:]
		}
		if key == "" || tenant == "" {
			return fmt.Errorf("entry %q is not KEY:TENANT", redact(item))
		}
		i, ok := index[tenant]
		if !ok {
			i = len(tenants)
			index[tenant] = i
			tenants = append(tenants, Tenant{Name: tenant})
		}
		tenants[i].APIKeys = append(tenants[i].APIKeys, key)
	}
	*ts = tenants
	return nil
}

// APIKeys maps each tenant API key to its tenant.
func (c *Config) APIKeys() map[string]string {
	keys := map[string]string{}
	for _, t := range c.Tenants {
		for _, k := range t.APIKeys {
			keys[k] = t.Name
		}
	}
	return keys
}

// TenantImages maps each tenant with images to them (job.Config.Images).
func (c *Config) TenantImages() map[string][]string {
	out := map[string][]string{}
	for _, t := range c.Tenants {
		if len(t.Images) > 0 {
			out[t.Name] = t.Images
		}
	}
	return out
}

// TenantShares maps each tenant with a weight or a running cap to them
// (job.Config.Shares).
func (c *Config) TenantShares() map[string]TenantShare {
	out := map[string]TenantShare{}
	for _, t := range c.Tenants {
		if t.Weight > 0 || t.MaxRunning > 0 {
			out[t.Name] = TenantShare{Weight: t.Weight, MaxRunning: t.MaxRunning}
		}
	}
	return out
}

// Policies maps each tenant with a policy to it.
func (c *Config) Policies() map[string]policy.TenantPolicy {
	out := map[string]policy.TenantPolicy{}
	for _, t := range c.Tenants {
		if t.Policy != nil {
			out[t.Name] = *t.Policy
		}
	}
	return out
}

// redact keeps a secret's first two characters, enough to find it.
func redact(s string) string {
	if len(s) <= 2 {
		return "**"
	}
	return s[:2] + strings.Repeat("*", min(len(s)-2, 8))
}

// CallbackSecrets maps each tenant to the key that signs its completion
// callbacks: its own callback_secret, else callbacks.secret. A tenant
// missing here (neither is set) may not give a callback_url.
func (c *Config) CallbackSecrets() map[string]string {
	out := map[string]string{}
	for _, t := range c.Tenants {
		if s := t.CallbackSecret; s != "" {
			out[t.Name] = s
		} else if c.Callbacks.Secret != "" {
			out[t.Name] = c.Callbacks.Secret
		}
	}
	if len(c.Tenants) == 0 && c.Callbacks.Secret != "" {
		out[DefaultTenant] = c.Callbacks.Secret
	}
	return out
}

// CallbackPrefixes returns callbacks.allow_private_cidrs parsed (Validate
// refuses bad entries).
func (c *Config) CallbackPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range c.Callbacks.AllowPrivateCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}
