package policy

// EgressPolicy is a tenant's allowlist for sandboxes (and the in-process
// http_request tool) with the http effect. The zero value allows nothing.
type EgressPolicy struct {
	// Allow lists what may be reached; a request passes when one rule
	// matches its host, port and method.
	Allow []EgressRule `yaml:"allow" json:"allow,omitempty"`
	// AllowPrivateCIDRs lists private, loopback or link-local networks
	// that may be reached despite the default refusal (on-premises
	// services, tests). Empty: none.
	AllowPrivateCIDRs []string `yaml:"allow_private_cidrs" json:"allow_private_cidrs,omitempty"`
}

// EgressRule allows one host (exact, or "*.example.com" for any subdomain)
// on some ports (empty: 80 and 443) with some methods (empty: any).
type EgressRule struct {
	Host    string   `yaml:"host" json:"host"`
	Ports   []int    `yaml:"ports" json:"ports,omitempty"`
	Methods []string `yaml:"methods" json:"methods,omitempty"`
}
