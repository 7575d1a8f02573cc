package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// recoveryMetrics are registered by the first RecoveryWaited or Recovering.
type recoveryMetrics struct {
	once  sync.Once
	waits prometheus.Histogram
}

// recoveryWait returns fencegate_recovery_wait_seconds, registering it once.
func (t *Telemetry) recoveryWait() prometheus.Histogram {
	t.recovery.once.Do(func() {
		t.recovery.waits = prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "fencegate", Name: "recovery_wait_seconds",
			Help: "Time a write waited for writes a crashed process (local fence) or a lost marker session (shared fence) may have left in flight " +
				"(one observation per wait; _count is the number of writes that waited).",
			Buckets: latencyBuckets,
		})
		t.Registry.MustRegister(t.recovery.waits)
	})
	return t.recovery.waits
}

// RecoveryWaited is the fences' recovery hook: one write waited for a
// recovery, this long.
func (t *Telemetry) RecoveryWaited(ctx context.Context, resource string, waited time.Duration, err error) {
	t.recoveryWait().Observe(waited.Seconds())
}

// Recovering exports fencegate_recovering: 1 while the fence waits out
// writes a crash or a lost session may have left in flight.
func (t *Telemetry) Recovering(v func() float64) {
	t.recoveryWait()
	t.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "fencegate", Name: "recovering",
		Help: "1 while the fence holds writes that a crashed process or a lost database session may have left in flight could overtake (see /readyz).",
	}, v))
}
