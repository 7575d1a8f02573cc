package telemetry

import "github.com/prometheus/client_golang/prometheus"

// StoreRegressed exports fencegate_store_regressed: 1 while the store guard
// refuses a store that went back (until `fencegate fence recover`), else 0.
func (t *Telemetry) StoreRegressed(v func() float64) {
	t.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "fencegate", Name: "store_regressed",
		Help: "1 while the fence store is found gone back (a promoted asynchronous standby, a restored backup) and fenced writes and token issuance are refused until `fencegate fence recover`.",
	}, v))
}
