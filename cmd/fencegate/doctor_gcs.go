package main

import (
	"context"
	"fmt"
	"net/url"

	"golang.org/x/oauth2"

	"github.com/fencegate/fencegate/adapters/gcs"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/precondition"
	"github.com/fencegate/fencegate/server"
)

// doctorGCSRoutes runs the ifGenerationMatch racing probe on every GCS
// route with a bucket to probe (bucket, or the route's gcs.check_bucket).
func doctorGCSRoutes(ctx context.Context, cfg *config.Config, bucket string) (checked, failed int) {
	for _, rc := range cfg.Gateway.Routes {
		if rc.GCS == nil {
			continue
		}
		b := probeWhere(rc.Name, bucket, rc.GCS.CheckBucket, "--bucket", "gcs.check_bucket")
		if b == "" {
			continue
		}
		checked++
		cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
		opts := server.GCSOptions(rc, cfg.Gateway.TokenHeader)
		opts.Generations = nopETags{}
		ts, err := gcs.Credentials(cctx, rc.GCS.CredentialsFile, rc.GCS.NoAuth)
		var up *gcs.Upstream
		if err == nil {
			opts.TokenSource = ts
			up, err = gcs.New(opts)
		}
		if err == nil {
			err = up.ProbeRace(cctx, b, 0)
		}
		cancel()
		endpoint := rc.GCS.Endpoint
		if endpoint == "" {
			endpoint = gcs.DefaultEndpoint
		}
		if err != nil {
			failed++
			fmt.Printf("route %s: FAIL: %v\n", rc.Name, err)
		} else {
			fmt.Printf("route %s: ok: %s honours ifGenerationMatch on uploads, racing writes included (bucket %s)\n", rc.Name, config.RedactURL(endpoint), b)
		}
		if !doctorGCSUnreadBody(ctx, rc, endpoint, b, ts) {
			failed++
		}
	}
	return checked, failed
}

// doctorGCSUnreadBody checks that the store reads (or discards) the body of
// a write it answers, or closes the connection: GCS routes keep their
// connections across writes (gcs.NewTransport), which is safe only then.
// The probe is an objects.update of a probe name in bucket whose body is
// itself a request; nothing is written.
func doctorGCSUnreadBody(ctx context.Context, rc config.Route, endpoint, bucket string, ts oauth2.TokenSource) bool {
	cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
	defer cancel()
	headers := map[string]string{}
	var err error
	if ts != nil {
		var tok *oauth2.Token
		if tok, err = ts.Token(); err == nil {
			headers["Authorization"] = tok.Type() + " " + tok.AccessToken
		}
	}
	f := relay.BodyRead
	if err == nil {
		f, err = relay.ProbeUnreadBody(cctx, endpoint, "storage/v1/b/"+url.PathEscape(bucket)+"/o", headers, nil)
	}
	return reportKeptUnreadBody(rc.Name, "GCS", config.RedactURL(endpoint), "bucket "+bucket, f, err)
}

// reportKeptUnreadBody prints the unread-body probe's finding for a route
// whose kind ("GCS", "Azure") keeps its connections across writes, and
// reports whether it passed.
func reportKeptUnreadBody(route, kind, up, where string, f relay.UnreadBodyFinding, err error) bool {
	switch {
	case err != nil:
		fmt.Printf("route %s: FAIL: unread-body probe (%s): %v\n", route, where, err)
		return false
	case f != relay.BodyRead:
		fmt.Printf("route %s: FAIL: %s answers a write without reading its body and takes the body for a request of its own; %s routes keep their connections across writes, so a worker's body could carry requests the fence never sees (%s)\n", route, up, kind, where)
		return false
	}
	fmt.Printf("route %s: ok: %s reads a write's body (or closes the connection) before its next request: writes keep their connections (%s)\n", route, up, where)
	return true
}
