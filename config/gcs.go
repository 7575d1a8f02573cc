package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// GCS is a Google Cloud Storage upstream, spoken to with the JSON API; see
// adapters/gcs. Workers authenticate to the gateway with the route's auth
// block (their bearer keys); the gateway talks to the store with its own
// credentials, which workers never hold.
type GCS struct {
	// Endpoint is the store's base URL. Default https://storage.googleapis.com.
	Endpoint string `yaml:"endpoint" jsonschema:"default=https://storage.googleapis.com"`
	// CredentialsFile is a service account key (JSON) the gateway
	// authenticates with. Empty: Application Default Credentials, unless
	// NoAuth.
	CredentialsFile string `yaml:"credentials_file"`
	// NoAuth sends no credentials upstream (an emulator such as
	// fake-gcs-server).
	NoAuth bool `yaml:"no_auth"`
	// Timeout bounds one forwarded request, body and answer. Default 30s.
	Timeout time.Duration `yaml:"timeout" jsonschema:"default=30s"`
	// CheckBucket, if set, is a bucket where the gateway may write and
	// delete a probe object at start (and `fencegate doctor`) to verify
	// that the store honours ifGenerationMatch, racing writes included.
	CheckBucket string `yaml:"check_bucket"`
	// Stamp writes each admitted write's token into the object's custom
	// metadata (StampKey), for `fencegate fence rebuild`.
	Stamp bool `yaml:"stamp"`
	// StampKey is the custom metadata key of the stamp. Default
	// fencing-token.
	StampKey string `yaml:"stamp_key" jsonschema:"default=fencing-token"`
	// SessionKey binds resumable upload sessions to the object and token
	// that opened them. Several gateways serving one store need the same
	// key; empty: a random key per process (a session then continues only
	// through the gateway process that opened it).
	SessionKey string `yaml:"session_key"`
}

func validateGCS(f string, r *Route) Errors {
	var errs Errors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: f + field, Msg: fmt.Sprintf(format, args...)})
	}
	g := r.GCS
	if g.Endpoint != "" {
		if u, err := url.Parse(g.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
			add(".gcs.endpoint", "must be an absolute http or https URL without a query")
		}
	}
	if g.NoAuth && g.CredentialsFile != "" {
		add(".gcs", "set credentials_file or no_auth, not both")
	}
	if g.Timeout < 0 {
		add(".gcs.timeout", "must not be negative")
	}
	if r.Auth == nil || len(r.Auth.APIKeys) == 0 {
		// Without them anyone who reaches the gateway writes with the
		// gateway's credentials.
		add(".auth.api_keys", "a gcs route needs the workers' own keys (workers never use the gateway's credentials)")
	}
	if k := g.StampKey; k != "" && (strings.ContainsAny(k, " \"\\") || len(k) > 128) {
		add(".gcs.stamp_key", "must be a plain metadata key, got %q", k)
	}
	if g.Stamp || r.Precondition == "generation" {
		if !strings.Contains(r.Resource, "{bucket}") || !strings.Contains(r.Resource, "{object}") {
			add(".resource", "stamp and precondition: generation need a resource naming one object, with {bucket} and {object}")
		}
	}
	return errs
}
