package config

import (
	"net"
	"net/url"
	"strings"
)

// EtcdTLS configures TLS to an etcd cluster's client URLs, for the etcd
// token source and the etcd store alike (adapters/etcd.ClientConfig). With
// it set every endpoint must be https://: a cluster reached over TLS and
// plain TCP at once would send the password (and the fence) in clear to
// the plain ones.
type EtcdTLS struct {
	// CAFile is the PEM bundle of the CAs that sign etcd's server
	// certificates (etcd's --trusted-ca-file side). Empty: the system's
	// roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the gateway's client certificate and key,
	// for a cluster run with --client-cert-auth. Set both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName, if set, is the name the server certificates are checked
	// against instead of each endpoint's host (endpoints given as IPs
	// behind a certificate issued for a DNS name).
	ServerName string `yaml:"server_name"`
}

// validateEtcdClient checks the client options an etcd token source or
// store shares: endpoints, credentials in pairs, and TLS that matches the
// endpoints' scheme. field is the YAML path of the section (e.g.
// gateway.routes[0].token_source.etcd).
func validateEtcdClient(field string, endpoints []string, username, password string, tls *EtcdTLS) Errors {
	var errs Errors
	add := func(f, msg string) { errs = append(errs, &FieldError{Field: f, Msg: msg}) }
	if len(endpoints) == 0 {
		add(field+".endpoints", "at least one endpoint is required (e.g. http://127.0.0.1:2379)")
	}
	if (username == "") != (password == "") {
		add(field, "set username and password together")
	}
	if tls == nil {
		for _, e := range endpoints {
			if strings.HasPrefix(e, "https://") {
				add(field+".tls", "endpoint "+RedactURL(e)+" is https://: set tls (ca_file at least, unless etcd's certificate is signed by a system root CA)")
				break
			}
		}
		return errs
	}
	if (tls.CertFile == "") != (tls.KeyFile == "") {
		add(field+".tls", "set cert_file and key_file together")
	}
	for _, e := range endpoints {
		if !strings.HasPrefix(e, "https://") {
			add(field+".endpoints", "endpoint "+RedactURL(e)+" is not https:// while tls is set: every endpoint of a TLS cluster must use it (the password and the fence would otherwise travel in clear)")
			break
		}
	}
	return errs
}

// etcdClientWarning is the warning for an etcd client section (token
// source or store) that sends a password over plain HTTP to an endpoint
// off loopback, or "" if it does not.
func etcdClientWarning(endpoints []string, username string, tls *EtcdTLS) string {
	if username == "" || tls != nil {
		return ""
	}
	for _, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil || u.Scheme == "https" {
			continue
		}
		host := u.Hostname()
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			continue
		}
		return "the password goes to " + RedactURL(e) + " in clear (plain HTTP): serve etcd's client URLs over TLS and set tls (docs/operations.md, \"etcd\")"
	}
	return ""
}
