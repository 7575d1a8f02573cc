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

// StoreLog exports the embedded store's advance-log health (read at scrape
// time from stats): fencegate_store_log_state (0 appending, 1 failing until
// the cause goes away, e.g. a full disk, 2 failed until the process is
// restarted, after a failed fdatasync) and
// fencegate_store_log_errors_total{op="append"|"checkpoint"}.
func (t *Telemetry) StoreLog(stats func() (state int, appendErrors, checkpointErrors uint64)) {
	t.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "fencegate", Name: "store_log_state",
		Help: "Embedded store's advance log: 0 appending, 1 failing until the cause goes away (no space), 2 failed until restart (a failed fdatasync).",
	}, func() float64 { s, _, _ := stats(); return float64(s) }))
	for _, op := range []string{"append", "checkpoint"} {
		t.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "fencegate", Name: "store_log_errors_total",
			Help:        "Embedded store's advance-log failures: appends (segment creation, write, fdatasync) and checkpoints into bbolt.",
			ConstLabels: prometheus.Labels{"op": op},
		}, func() float64 {
			_, a, c := stats()
			if op == "append" {
				return float64(a)
			}
			return float64(c)
		}))
	}
}
