package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/fencegate/fencegate/adapters/gcs"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
)

// GCSOptions maps a route's `gcs:` section (which must be set), without
// the gateway's credentials, the transport, the generation store and the
// logger, which are the caller's.
func GCSOptions(rc config.Route) gcs.Options {
	c := rc.GCS
	return gcs.Options{
		Route: rc.Name, Endpoint: c.Endpoint, Resource: rc.Resource,
		PreconditionGeneration: rc.Precondition == "generation",
		Stamp:                  c.Stamp, StampKey: c.StampKey,
		SessionKey: []byte(c.SessionKey),
	}
}

// newGCSUpstream builds the upstream of a `gcs:` route. Generations are
// recorded in the process's store (the ETag records of bolt and postgres).
// Serving (a store was given) with precondition generation and a
// check_bucket, the racing probe runs first: a store that ignores
// ifGenerationMatch would turn the guarantee into a silent no-op.
func newGCSUpstream(cfg *config.Config, rc config.Route, log *slog.Logger, transport http.RoundTripper, stores []gateway.Store) (*gcs.Upstream, error) {
	opts := GCSOptions(rc)
	opts.Transport = transport
	opts.Logger = log.With("component", "gcs", "route", rc.Name)
	if rc.Precondition == "generation" {
		opts.Generations = etagStore(stores)
	}
	ctx, cancel := context.WithTimeout(context.Background(), precondition.ProbeTimeout)
	defer cancel()
	ts, err := gcs.Credentials(ctx, rc.GCS.CredentialsFile, rc.GCS.NoAuth)
	if err != nil {
		return nil, err
	}
	opts.TokenSource = ts
	up, err := gcs.New(opts)
	if err != nil {
		return nil, err
	}
	if len(stores) > 0 && rc.Precondition == "generation" && rc.GCS.CheckBucket != "" {
		if err := up.ProbeRace(ctx, rc.GCS.CheckBucket, 0); err != nil {
			return nil, fmt.Errorf("precondition generation: %w", err)
		}
	}
	return up, nil
}
