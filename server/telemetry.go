package server

import (
	"context"
	"net/url"
	"sync"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/telemetry"
)

// setupTelemetry creates the process's metrics registry and, with
// telemetry.otlp_endpoint set, its tracer provider; /metrics goes on the
// admin listener. The provider is flushed when the server closes.
func (s *Server) setupTelemetry(ctx context.Context, cfg *config.Config) error {
	t, err := telemetry.New(ctx, cfg.Telemetry, telemetry.Options{})
	if err != nil {
		return err
	}
	s.tel = t
	s.closers = append(s.closers, t)
	s.admin.Handle("GET /metrics", t.Handler())
	setLogContext.Do(func() { gateway.LogContext = telemetry.LogAttrs })
	if t.Tracing() {
		endpoint := cfg.Telemetry.OTLPEndpoint
		if u, err := url.Parse(endpoint); err == nil {
			endpoint = u.Redacted()
		}
		s.log.Info("tracing on", "otlp_endpoint", endpoint, "service_name", cfg.Telemetry.ServiceName)
	}
	return nil
}

// gateway.LogContext is process-wide; it is set once, and LogAttrs finds
// each server's spans through the request context.
var setLogContext sync.Once
