package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/fencegate/fencegate/adapters/azure"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/precondition"
	"github.com/fencegate/fencegate/server"
)

// doctorAzureRoutes runs the If-Match racing probe and the unread-body
// probe on every Azure route with a container to probe (container, or the
// route's azure.check_container).
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
		} else {
			fmt.Printf("route %s: ok: %s honours If-Match and If-None-Match on Put Blob, racing writes included (container %s)\n", rc.Name, config.RedactURL(rc.Azure.Endpoint), c)
		}
		if !doctorAzureUnreadBody(ctx, rc, c) {
			failed++
		}
	}
	return checked, failed
}

// doctorAzureUnreadBody checks that the store reads (or discards) the body
// of a write it answers, or closes the connection: Azure routes keep their
// connections across writes, which is safe only then. The probe is an
// unsigned Put Blob of a probe name in container whose body is itself a
// request: the store refuses it for want of credentials, nothing is
// written, and the answer comes before the body is needed, which is the
// case the probe is for.
func doctorAzureUnreadBody(ctx context.Context, rc config.Route, container string) bool {
	cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
	defer cancel()
	f, err := relay.ProbeUnreadBody(cctx, rc.Azure.Endpoint, url.PathEscape(container), nil, nil)
	return reportKeptUnreadBody(rc.Name, "Azure", config.RedactURL(rc.Azure.Endpoint), "container "+container, f, err)
}
