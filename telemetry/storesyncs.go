package telemetry

import "github.com/prometheus/client_golang/prometheus"

// StoreSyncs exports the embedded store's fdatasyncs and fsyncs (read at
// scrape time from syncs): fencegate_store_fsyncs_total. Divided into
// fencegate_store_commit_changes_total, the changes per fsync.
func (t *Telemetry) StoreSyncs(syncs func() uint64) {
	t.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "fencegate", Name: "store_fsyncs_total",
		Help: "fdatasyncs and fsyncs made by the embedded store (advance log batches: one each; bbolt commits and checkpoints: two each).",
	}, func() float64 { return float64(syncs()) }))
}
