package config_test

import (
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/coordinator"
)

// TestCoordinatorMaxWait: the lease service reads a max_wait of zero or
// below as its default (1m), so the coordinator listener's write timeout
// must leave room for that wait: with max_wait: 0s it was 30s, and an
// acquire that waited 40s for a lease got it (token issued, fence raised)
// and lost its answer; with a negative max_wait the listener had no write
// timeout at all. A negative max_wait is refused.
func TestCoordinatorMaxWait(t *testing.T) {
	const base = "gateway:\n  routes:\n    - {name: o, match: {path_prefix: /o/}, upstream: {url: \"http://127.0.0.1:1\"}, resource: \"{path}\"}\n"
	c, err := config.Parse("t.yaml", []byte(base+"coordinator: {enabled: true, max_wait: 0s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if wt := c.Coordinator.WriteTimeout(); wt < coordinator.DefaultMaxWait+coordinator.AnswerMargin {
		t.Errorf("max_wait 0s: write timeout %v, below the default wait the service allows (%v) plus the answer margin", wt, coordinator.DefaultMaxWait)
	}
	if _, err := config.Parse("t.yaml", []byte(base+"coordinator: {enabled: true, max_wait: -5m}\n")); err == nil {
		t.Error("max_wait -5m accepted")
	}
}
