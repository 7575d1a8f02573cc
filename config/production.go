package config

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
)

// Auth says who may use a route, the coordinator API or the admin API. With
// no entries (or no auth block) nobody is asked who they are. With entries,
// a request must present one of them: a bearer API key or a client
// certificate verified against tls.client_ca_file.
type Auth struct {
	// APIKeys are bearer keys (Authorization: Bearer <key>), stored as the
	// SHA-256 of the key in hex so the config file holds no secret.
	APIKeys []APIKey `yaml:"api_keys"`
	// ClientCerts are identities proven by a client certificate (mTLS).
	ClientCerts []ClientCert `yaml:"client_certs"`
}

// APIKey is one bearer key. Revoke a key by removing it (SIGHUP reloads).
type APIKey struct {
	// Owner is the identity: the owner in logs, spans and fence records.
	Owner string `yaml:"owner"`
	// SHA256 is the lower-case hex SHA-256 of the key
	// (printf %s "$KEY" | sha256sum).
	SHA256 string `yaml:"sha256"`
	// Prefixes, if set, limit the identity to resources whose key starts
	// with one of them. Empty: every resource.
	Prefixes []string `yaml:"prefixes"`
	// BindOwner, if set, limits the lease owner this key may name on the
	// coordinator and admin APIs to Owner or Owner/<anything>: another
	// key cannot renew or release its leases by naming its owner.
	BindOwner bool `yaml:"bind_owner"`
}

// ClientCert is an identity proven by a client certificate: the certificate
// must chain to tls.client_ca_file and name Name as its Common Name or as a
// DNS, URI or e-mail subject alternative name.
type ClientCert struct {
	// Name is the certificate's Common Name or subject alternative name.
	Name string `yaml:"name"`
	// Prefixes are the resource prefixes this identity may use, as
	// APIKey's.
	Prefixes []string `yaml:"prefixes"`
	// BindOwner is as APIKey's, with Name as the owner.
	BindOwner bool `yaml:"bind_owner"`
}

// Enabled reports whether a is set and asks for credentials.
func (a *Auth) Enabled() bool {
	return a != nil && (len(a.APIKeys) > 0 || len(a.ClientCerts) > 0)
}

// UpstreamTLS configures the gateway's TLS client towards an https upstream.
type UpstreamTLS struct {
	// CAFile is a PEM bundle of roots to verify the upstream with, instead
	// of the system roots.
	CAFile string `yaml:"ca_file"`
	// ServerName overrides the name verified in the upstream's certificate
	// (and sent as SNI); default the URL's host.
	ServerName string `yaml:"server_name"`
	// CertFile and KeyFile are the gateway's client certificate for mutual
	// TLS to the upstream. Both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// TLS listener names that tls.listeners may list.
var tlsListeners = []string{"gateway", "coordinator", "admin"}

// ACME challenge types that tls.acme.challenges may list.
var acmeChallenges = []string{"http-01", "tls-alpn-01"}

func (c *Config) applyEdgeDefaults() {
	t := &c.TLS
	if t.Mode == "" {
		t.Mode = "off"
	}
	if t.Mode != "off" && len(t.Listeners) == 0 {
		t.Listeners = []string{"gateway"}
	}
	if a := t.ACME; a != nil {
		if len(a.Challenges) == 0 {
			a.Challenges = slices.Clone(acmeChallenges)
		}
		for i, ch := range a.Challenges {
			a.Challenges[i] = strings.ToLower(ch)
		}
		if a.HTTPListen == "" && slices.Contains(a.Challenges, "http-01") {
			a.HTTPListen = ":80"
		}
	}
}

// validateEdges checks TLS, authentication and per-route limits.
func (c *Config) validateEdges() Errors {
	var errs Errors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	t := c.TLS
	for i, l := range t.Listeners {
		if !slices.Contains(tlsListeners, l) {
			add(fmt.Sprintf("tls.listeners[%d]", i), "must be gateway, coordinator or admin, not %q", l)
		}
	}
	if a := t.ACME; a != nil && t.Mode == "acme" {
		for i, d := range a.Domains {
			if d == "" || strings.ContainsAny(d, " /:") || net.ParseIP(d) != nil {
				add(fmt.Sprintf("tls.acme.domains[%d]", i), "must be a DNS name, got %q", d)
			}
		}
		if a.CA != "" {
			if u, err := url.Parse(a.CA); err != nil || u.Scheme != "https" || u.Host == "" {
				add("tls.acme.ca", "must be an https URL of an ACME directory, got %q", a.CA)
			}
		}
		for i, ch := range a.Challenges {
			if !slices.Contains(acmeChallenges, ch) {
				add(fmt.Sprintf("tls.acme.challenges[%d]", i), "must be http-01 or tls-alpn-01, not %q", ch)
			}
		}
		if slices.Contains(a.Challenges, "tls-alpn-01") && !slices.Contains(t.Listeners, "gateway") {
			add("tls.acme.challenges", "tls-alpn-01 is answered on the gateway listener, which tls.listeners does not include")
		}
	}
	if t.ClientCAFile != "" && t.Mode == "off" {
		add("tls.client_ca_file", "client certificates need tls.mode files or acme")
	}
	auths := []struct {
		field string
		a     *Auth
	}{{"coordinator.auth", c.Coordinator.Auth}, {"admin.auth", c.Admin.Auth}}
	if c.Gateway != nil {
		for i := range c.Gateway.Routes {
			r := &c.Gateway.Routes[i]
			f := fmt.Sprintf("gateway.routes[%d]", i)
			auths = append(auths, struct {
				field string
				a     *Auth
			}{f + ".auth", r.Auth})
			if r.MaxInflightWrites < 0 {
				add(f+".max_inflight_writes", "must not be negative")
			}
			if u := r.Upstream; u != nil && u.TLS != nil {
				if (u.TLS.CertFile == "") != (u.TLS.KeyFile == "") {
					add(f+".upstream.tls", "cert_file and key_file go together")
				}
				if !strings.HasPrefix(u.URL, "https://") {
					add(f+".upstream.tls", "only applies to an https upstream url")
				}
			}
		}
	}
	for _, x := range auths {
		if x.a == nil {
			continue
		}
		if len(x.a.ClientCerts) > 0 && t.ClientCAFile == "" {
			add(x.field+".client_certs", "client certificates need tls.client_ca_file to verify them")
		}
		seen := map[string]bool{}
		for i, k := range x.a.APIKeys {
			f := fmt.Sprintf("%s.api_keys[%d]", x.field, i)
			if k.Owner == "" {
				add(f+".owner", "required")
			}
			if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != 32 || k.SHA256 != strings.ToLower(k.SHA256) {
				add(f+".sha256", "must be 64 lower-case hex digits (printf %%s \"$KEY\" | sha256sum)")
			} else if seen[k.SHA256] {
				add(f+".sha256", "the same key is listed twice")
			}
			seen[k.SHA256] = true
			for j, p := range k.Prefixes {
				if p == "" {
					add(fmt.Sprintf("%s.prefixes[%d]", f, j), "must not be empty (leave prefixes out to allow every resource)")
				}
			}
		}
		for i, cc := range x.a.ClientCerts {
			f := fmt.Sprintf("%s.client_certs[%d]", x.field, i)
			if cc.Name == "" {
				add(f+".name", "required")
			}
			for j, p := range cc.Prefixes {
				if p == "" {
					add(fmt.Sprintf("%s.prefixes[%d]", f, j), "must not be empty (leave prefixes out to allow every resource)")
				}
			}
		}
	}
	return errs
}
