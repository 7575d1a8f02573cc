package config

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Azure is an Azure Blob Storage upstream; see adapters/azure. Workers sign
// their requests with Shared Key credentials of their own (Clients), which
// the gateway verifies; the gateway signs its forwards with the store
// account's key (or appends its SAS), which workers never hold.
type Azure struct {
	// Endpoint is the store account's blob service URL,
	// https://ACCOUNT.blob.core.windows.net, or an emulator's
	// http://127.0.0.1:10000/devstoreaccount1.
	Endpoint string `yaml:"endpoint"`
	// AccountName and AccountKey are the store account's Shared Key.
	AccountName string `yaml:"account_name"`
	AccountKey  string `yaml:"account_key"`
	// SAS, instead of a key, is a shared access signature (a query
	// string) the gateway appends to its forwards.
	SAS string `yaml:"sas"`
	// Clients are the workers' Shared Key credentials (an account name of
	// the worker's own and a base64 key), verified by the gateway.
	Clients []AzureClient `yaml:"clients"`
	// Timeout bounds one forwarded request, body and answer. Default 30s.
	Timeout time.Duration `yaml:"timeout"`
	// CheckContainer, if set, is a container where the gateway may write
	// and delete a probe blob at start (and `fencegate doctor`) to verify
	// that the store honours If-Match and If-None-Match, racing writes
	// included.
	CheckContainer string `yaml:"check_container"`
	// Stamp writes each admitted write's token into the blob's metadata
	// (StampKey), for `fencegate fence rebuild`.
	Stamp bool `yaml:"stamp"`
	// StampKey is the metadata name of the stamp. Default fencing_token.
	StampKey string `yaml:"stamp_key"`
	// LeaseGuard makes the gateway hold an infinite lease on every blob
	// it writes, so that a write around the gateway without the lease id
	// is refused by the store (docs/azure.md says what it does not guard).
	LeaseGuard bool `yaml:"lease_guard"`
	// LeaseSecret derives the lease ids; several gateways serving one
	// store need the same secret. Required with lease_guard.
	LeaseSecret string `yaml:"lease_secret"`
}

// AzureClient is a worker's Shared Key credential.
type AzureClient struct {
	// AccountName is the name the worker signs with (not the store
	// account's).
	AccountName string `yaml:"account_name"`
	// AccountKey is the worker's key, base64.
	AccountKey string `yaml:"account_key"`
}

func validateAzure(f string, r *Route) Errors {
	var errs Errors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: f + field, Msg: fmt.Sprintf(format, args...)})
	}
	a := r.Azure
	if u, err := url.Parse(a.Endpoint); a.Endpoint == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		add(".azure.endpoint", "required: an absolute http or https URL without a query (the account's blob service)")
	}
	switch {
	case a.AccountKey != "" && a.SAS != "":
		add(".azure", "set account_key or sas, not both")
	case a.AccountKey != "":
		if a.AccountName == "" {
			add(".azure.account_name", "required with account_key")
		}
		if _, err := base64.StdEncoding.DecodeString(a.AccountKey); err != nil {
			add(".azure.account_key", "must be base64 (the key as the portal shows it)")
		}
	case a.SAS != "":
		if q, err := url.ParseQuery(a.SAS); err != nil || q.Get("sig") == "" {
			add(".azure.sas", "must be a shared access signature (a query string with sig)")
		}
	default:
		add(".azure", "the gateway's own credentials are required: account_name and account_key, or sas")
	}
	if len(a.Clients) == 0 {
		// Without them anyone who reaches the gateway writes with the
		// gateway's credentials.
		add(".azure.clients", "an azure route needs the workers' own Shared Key credentials (workers never use the gateway's)")
	}
	seen := map[string]bool{}
	for i, c := range a.Clients {
		cf := fmt.Sprintf(".azure.clients[%d]", i)
		switch {
		case c.AccountName == "":
			add(cf+".account_name", "required")
		case c.AccountName == a.AccountName:
			add(cf+".account_name", "must differ from the store account's name")
		case seen[c.AccountName]:
			add(cf+".account_name", "duplicate %q", c.AccountName)
		}
		seen[c.AccountName] = true
		if k, err := base64.StdEncoding.DecodeString(c.AccountKey); err != nil || len(k) == 0 {
			add(cf+".account_key", "required, base64")
		}
	}
	if a.Timeout < 0 {
		add(".azure.timeout", "must not be negative")
	}
	if k := a.StampKey; k != "" && !identifier(k) {
		add(".azure.stamp_key", "must be a metadata name (letters, digits and _, not starting with a digit), got %q", k)
	}
	if a.LeaseGuard && len(a.LeaseSecret) < 16 {
		add(".azure.lease_secret", "lease_guard needs a secret of at least 16 characters (it derives the lease ids)")
	}
	if a.Stamp || a.LeaseGuard || r.Precondition == "etag" {
		if !containsAll(r.Resource, "{container}", "{blob}") {
			add(".resource", "stamp, lease_guard and precondition: etag need a resource naming one blob, with {container} and {blob}")
		}
	}
	return errs
}

// identifier reports whether s is a C# identifier of ASCII letters, digits
// and _ (what the Blob service takes as a metadata name).
func identifier(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != "" && len(s) <= 128
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
