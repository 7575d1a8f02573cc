package config

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/fencegate/fencegate/coordinator"
)

// Listener limits and the protection of the operator APIs (admin,
// coordinator). See docs/production.md, "Listeners".

// APIGuard is what the admin and coordinator listeners share beyond auth.
type APIGuard struct {
	// AllowedHosts are the Host header values (without port) the listener
	// answers, besides its own listen host, localhost, 127.0.0.1, ::1 and
	// any IP literal (an IP address cannot be DNS-rebound). An entry
	// starting with "." allows every subdomain (".svc.cluster.local");
	// "*" allows any Host (not recommended).
	AllowedHosts []string `yaml:"allowed_hosts"`
	// MaxConnections caps the connections the listener holds at once;
	// further clients wait in the kernel's accept queue, holding no file
	// descriptor of the process. Default 128 (admin), 1024 (coordinator).
	MaxConnections int `yaml:"max_connections"`
	// AllowUnauthenticated lets the listener bind a non-loopback address
	// without an auth block. Without it such a configuration is refused:
	// anyone who can reach the port could move fences or take leases.
	AllowUnauthenticated bool `yaml:"allow_unauthenticated" jsonschema:"default=false"`
}

// Default connection caps.
const (
	DefaultAdminMaxConnections       = 128
	DefaultCoordinatorMaxConnections = 1024
)

// DefaultMaxAdvance is the default fence.max_advance.
const DefaultMaxAdvance int64 = 1_000_000

// MaxAdvanceOrDefault is fence.max_advance with its default applied; a
// negative value (no ceiling) is returned as it is.
func (f Fence) MaxAdvanceOrDefault() int64 {
	if f.MaxAdvance == 0 {
		return DefaultMaxAdvance
	}
	return f.MaxAdvance
}

// WriteTimeout bounds writing one coordinator answer: an acquire may wait
// up to max_wait before it answers (zero: the lease service's default).
func (c Coordinator) WriteTimeout() time.Duration {
	wait := c.MaxWait
	if wait <= 0 {
		wait = coordinator.DefaultMaxWait
	}
	return wait + coordinator.AnswerMargin
}

// IsLoopback reports whether a listen address binds only the loopback
// interface (127.0.0.0/8, ::1, localhost). ":8081" and "0.0.0.0:8081" do not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *Config) applyListenerDefaults() {
	if c.Admin.MaxConnections == 0 {
		c.Admin.MaxConnections = DefaultAdminMaxConnections
	}
	if c.Coordinator.MaxConnections == 0 {
		c.Coordinator.MaxConnections = DefaultCoordinatorMaxConnections
	}
}

// validateListeners refuses an operator API bound beyond loopback without
// credentials, and nonsense limits.
func (c *Config) validateListeners() Errors {
	var errs Errors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	type api struct {
		name, listen string
		on           bool
		auth         *Auth
		guard        APIGuard
	}
	for _, a := range []api{
		{"admin", c.Admin.Listen, c.Admin.Listen != "", c.Admin.Auth, c.Admin.APIGuard},
		{"coordinator", c.Coordinator.Listen, c.Coordinator.Enabled, c.Coordinator.Auth, c.Coordinator.APIGuard},
	} {
		if !a.on {
			continue
		}
		if !IsLoopback(a.listen) && !a.auth.Enabled() && !a.guard.AllowUnauthenticated {
			add(a.name+".auth", "%s.listen %s is not a loopback address: configure %s.auth (api_keys or client_certs), "+
				"bind 127.0.0.1, or set %s.allow_unauthenticated: true if a network policy really keeps everyone else out",
				a.name, a.listen, a.name, a.name)
		}
		if a.guard.MaxConnections < 0 {
			add(a.name+".max_connections", "must not be negative")
		}
		for i, h := range a.guard.AllowedHosts {
			if h == "" || strings.ContainsAny(h, " /:") && net.ParseIP(h) == nil {
				add(fmt.Sprintf("%s.allowed_hosts[%d]", a.name, i), "must be a host name without port, got %q", h)
			}
		}
	}
	if c.Gateway != nil && c.Gateway.MaxConnections < 0 {
		add("gateway.max_connections", "must not be negative")
	}
	return errs
}
