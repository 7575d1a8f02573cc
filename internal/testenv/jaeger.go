package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// JaegerServer is a running Jaeger all-in-one (v2, OTel-collector based) with
// in-memory storage.
type JaegerServer struct {
	OTLPGRPC string // host:port of the OTLP gRPC receiver (insecure)
	OTLPHTTP string // http://127.0.0.1:PORT of the OTLP HTTP receiver (POST /v1/traces)
	QueryURL string // http://127.0.0.1:PORT of the query API and UI (/api/services, /api/traces)
}

// jaegerConfig is a loopback-only all-in-one: OTLP in, memory storage, query
// out; Jaeger's own traces and metrics off.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info

extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%[5]d
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%[3]d
    grpc:
      endpoint: 127.0.0.1:%[4]d

receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%[1]d
      http:
        endpoint: 127.0.0.1:%[2]d

processors:
  batch:
    timeout: 100ms

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// Jaeger starts jaeger with a loopback-only config and stops it at the end of
// the test. The batch processor flushes every 100ms, so spans are queryable
// shortly after export.
func Jaeger(t testing.TB) *JaegerServer {
	t.Helper()
	bin := tool(t, "jaeger", "jaeger")
	configFile := filepath.Join(t.TempDir(), "jaeger.yaml")
	_, ports := startServer(t, "jaeger", 5, nil, bin,
		func(p []int) []string {
			if err := os.WriteFile(configFile, []byte(fmt.Sprintf(jaegerConfig, p[0], p[1], p[2], p[3], p[4])), 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{"--config", configFile}
		},
		func(ctx context.Context, p *process, ports []int) error {
			if err := waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/api/services", ports[2]), 60*time.Second, p.done); err != nil {
				return err
			}
			if err := waitTCP(ctx, fmt.Sprintf("127.0.0.1:%d", ports[0]), 30*time.Second, p.done); err != nil {
				return err
			}
			return waitTCP(ctx, fmt.Sprintf("127.0.0.1:%d", ports[1]), 30*time.Second, p.done)
		})
	return &JaegerServer{
		OTLPGRPC: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		OTLPHTTP: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		QueryURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
	}
}
