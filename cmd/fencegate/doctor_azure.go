package main

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate/adapters/azure"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/precondition"
	"github.com/fencegate/fencegate/server"
)

// doctorAzureRoutes runs the If-Match racing probe on every Azure route
// with a container to probe (container, or the route's
// azure.check_container).
func doctorAzureRoutes(ctx context.Context, cfg *config.Config, container string) (checked, failed int) {
	for _, rc := range cfg.Gateway.Routes {
		if rc.Azure == nil {
			continue
		}
		c := probeWhere(rc.Name, container, rc.Azure.CheckContainer, "--container", "azure.check_container")
		if c == "" {
			continue
		}
		checked++
		cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
		opts := server.AzureOptions(rc, cfg.Gateway.TokenHeader)
		opts.PreconditionETag, opts.LeaseGuard = false, false
		up, err := azure.New(opts)
		if err == nil {
			err = up.ProbeRace(cctx, c, 0)
		}
		cancel()
		if err != nil {
			failed++
			fmt.Printf("route %s: FAIL: %v\n", rc.Name, err)
			continue
		}
		fmt.Printf("route %s: ok: %s honours If-Match and If-None-Match on Put Blob, racing writes included (container %s)\n", rc.Name, config.RedactURL(rc.Azure.Endpoint), c)
	}
	return checked, failed
}
