package server

import (
	"context"
	"net/url"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/telemetry"
)

// setupTelemetry creates the process's metrics registry and, with
// telemetry.otlp_endpoint set, its tracer provider; /metrics goes on the
// admin listener. The provider is flushed when the server closes.
func (s *Server) setupTelemetry(ctx context.Context, cfg *config.Config, build telemetry.BuildInfo) error {
	opts := TelemetryOptions(cfg.Telemetry)
	opts.Build = build
	t, err := telemetry.New(ctx, opts)
	if err != nil {
		return err
	}
	s.tel = t
	s.closers = append(s.closers, t)
	s.admin.Handle("GET /metrics", t.Handler())
	if t.Tracing() {
		endpoint := cfg.Telemetry.OTLPEndpoint
		if u, err := url.Parse(endpoint); err == nil {
			endpoint = u.Redacted()
		}
		s.log.Info("tracing on", "otlp_endpoint", endpoint, "service_name", cfg.Telemetry.ServiceName)
	}
	return nil
}
