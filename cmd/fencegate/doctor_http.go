package main

import (
	"context"
	"fmt"

	httpup "github.com/fencegate/fencegate/adapters/http"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/precondition"
	"github.com/fencegate/fencegate/server"
)

// doctorHTTPRoutes runs the racing probe on every plain HTTP route with
// precondition: etag: many concurrent conditional PUTs to one probe object
// under path (default: the route's upstream.check_path), of which exactly
// one may win. It prints one line per route and returns how many it
// checked and how many failed.
func doctorHTTPRoutes(ctx context.Context, cfg *config.Config, path string) (checked, failed int) {
	if cfg.Gateway == nil {
		return 0, 0
	}
	for _, rc := range cfg.Gateway.Routes {
		if rc.Upstream == nil || rc.Precondition != "etag" {
			continue
		}
		p := probeWhere(rc.Name, path, rc.Upstream.CheckPath, "-path", "upstream.check_path")
		if p == "" {
			continue
		}
		checked++
		h, err := httpup.New(server.HTTPUpstreamOptions(rc, cfg.Gateway.TokenHeader))
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
			err = h.CheckConditionalWrites(cctx, p, 0)
			cancel()
		}
		if err != nil {
			failed++
			fmt.Printf("route %s: FAIL: %v\n", rc.Name, err)
			continue
		}
		fmt.Printf("route %s: ok: %s honours If-Match and If-None-Match on PUT, racing writes included (path %s)\n", rc.Name, config.RedactURL(rc.Upstream.URL), p)
	}
	return checked, failed
}
