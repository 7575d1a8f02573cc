package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// The checks below find what would otherwise fail only when `fencegate
// serve` starts: two listeners on one address, an address net.Listen
// cannot parse, an S3 route the adapter refuses. Validate runs them, so
// `fencegate validate` catches them too.

// listenAddr is one configured listener address.
type listenAddr struct {
	field, addr string
}

// listenAddrs are the addresses serve binds, with their field paths.
func (c *Config) listenAddrs() []listenAddr {
	var ls []listenAddr
	if c.Gateway != nil {
		ls = append(ls, listenAddr{"gateway.listen", c.Gateway.Listen})
	}
	if c.Admin.Listen != "" {
		ls = append(ls, listenAddr{"admin.listen", c.Admin.Listen})
	}
	if c.Coordinator.Enabled && c.Coordinator.Listen != "" {
		ls = append(ls, listenAddr{"coordinator.listen", c.Coordinator.Listen})
	}
	if a := c.TLS.ACME; c.TLS.Mode == "acme" && a != nil && a.HTTPListen != "" {
		ls = append(ls, listenAddr{"tls.acme.http_listen", a.HTTPListen})
	}
	return ls
}

// validateListenAddrs checks that every listener address parses and that no
// two of them bind the same port on overlapping addresses: ":8080",
// "0.0.0.0:8080" and "[::]:8080" all take port 8080 on every address (Go
// listens dual-stack on a wildcard), so they clash with each other and with
// "127.0.0.1:8080". Port 0 (any free port) never clashes.
func (c *Config) validateListenAddrs() Errors {
	var errs Errors
	type bound struct {
		field, host string
		port        int
	}
	var seen []bound
	for _, l := range c.listenAddrs() {
		host, port, err := splitListen(l.addr)
		if err != nil {
			errs = append(errs, &FieldError{Field: l.field, Msg: err.Error()})
			continue
		}
		for _, b := range seen {
			if port != 0 && b.port == port && hostsOverlap(b.host, host) {
				errs = append(errs, &FieldError{Field: l.field,
					Msg: fmt.Sprintf("%q takes the same port as %s (%q): every listener needs its own", l.addr, b.field, net.JoinHostPort(b.host, strconv.Itoa(b.port)))})
				break
			}
		}
		seen = append(seen, bound{l.field, host, port})
	}
	return errs
}

// splitListen parses host:port as net.Listen("tcp", addr) would, with a
// numeric port.
func splitListen(addr string) (host string, port int, err error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port (e.g. 127.0.0.1:8080, :8080, [::1]:8080)", addr)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("%q: port must be a number from 0 to 65535", addr)
	}
	if h != "" && strings.ContainsAny(h, " /%[]") {
		return "", 0, fmt.Errorf("%q: %q is not an IP address or host name", addr, h)
	}
	return h, n, nil
}

// hostsOverlap reports whether listeners on hosts a and b share addresses.
// Without resolving names: a wildcard overlaps everything, "localhost"
// overlaps the loopback addresses, and otherwise equal addresses overlap.
func hostsOverlap(a, b string) bool {
	na, nb := normHost(a), normHost(b)
	switch {
	case na == "*" || nb == "*":
		return true
	case na == "localhost" || nb == "localhost":
		other := na + nb
		other = strings.TrimPrefix(strings.TrimSuffix(other, "localhost"), "localhost")
		if other == "" {
			return true
		}
		ip, err := netip.ParseAddr(other)
		return err == nil && ip.IsLoopback()
	}
	return na == nb
}

func normHost(h string) string {
	if h == "" {
		return "*"
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		ip = ip.Unmap()
		if ip.IsUnspecified() {
			return "*"
		}
		return ip.String()
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// validateS3 checks an S3 route as adapters/s3 does when it builds it.
func validateS3(f string, s *S3) Errors {
	var errs Errors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: f + ".s3" + field, Msg: fmt.Sprintf(format, args...)})
	}
	if s.Endpoint != "" {
		if u, err := url.Parse(s.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add(".endpoint", "must be an absolute http or https URL")
		}
	}
	if (s.AccessKeyID == "") != (s.SecretAccessKey == "") {
		add("", "set both access_key_id and secret_access_key, or neither (AWS default chain)")
	}
	if len(s.Clients) == 0 {
		add(".clients", "at least one worker key is required (workers never use the gateway's credentials)")
	}
	for i, cl := range s.Clients {
		cf := fmt.Sprintf(".clients[%d]", i)
		if cl.AccessKeyID == "" || cl.SecretAccessKey == "" {
			add(cf, "access_key_id and secret_access_key are required")
		} else if cl.AccessKeyID == s.AccessKeyID {
			add(cf+".access_key_id", "a worker must not sign with the gateway's own access key")
		}
	}
	if s.Timeout < 0 {
		add(".timeout", "must not be negative")
	}
	switch s.BucketConfig {
	case "", "refuse", "fence":
	default:
		add(".bucket_config", "must be refuse or fence, got %q", s.BucketConfig)
	}
	return errs
}
