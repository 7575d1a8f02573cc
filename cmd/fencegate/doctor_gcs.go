package main

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate/adapters/gcs"
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
		if err != nil {
			failed++
			fmt.Printf("route %s: FAIL: %v\n", rc.Name, err)
			continue
		}
		endpoint := rc.GCS.Endpoint
		if endpoint == "" {
			endpoint = gcs.DefaultEndpoint
		}
		fmt.Printf("route %s: ok: %s honours ifGenerationMatch on uploads, racing writes included (bucket %s)\n", rc.Name, config.RedactURL(endpoint), b)
	}
	return checked, failed
}
