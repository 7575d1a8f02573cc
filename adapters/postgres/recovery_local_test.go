package postgres

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/fencetest"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestFenceCrash: the crash contract of the local fence on PostgreSQL (its
// serving record in fencegate_meta), as on the embedded store.
func TestFenceCrash(t *testing.T) {
	fencetest.RunCrash(t, func(t *testing.T) fencetest.OpenStore {
		url := testenv.Postgres(t).URL
		return func(t *testing.T) (gateway.Store, func()) {
			st, err := Open(context.Background(), url, Options{MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			return st, func() { st.Close() }
		}
	})
}
