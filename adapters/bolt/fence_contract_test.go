package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/fencetest"
)

// TestFenceContract: gateway.LocalFence over the embedded store passes the
// suite every fence passes.
func TestFenceContract(t *testing.T) {
	fencetest.Run(t, fencetest.Options{}, func(t *testing.T) fencetest.Open {
		path := filepath.Join(t.TempDir(), "fencegate.db")
		return func(t *testing.T) (gateway.Fence, func()) {
			st, err := bolt.Open(path, bolt.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), func() { st.Close() }
		}
	})
}

// TestFenceCrash: the crash contract of the local fence on the embedded
// store (its serving record in the advance log).
func TestFenceCrash(t *testing.T) {
	fencetest.RunCrash(t, func(t *testing.T) fencetest.OpenStore {
		path := filepath.Join(t.TempDir(), "fencegate.db")
		return func(t *testing.T) (gateway.Store, func()) {
			st, err := bolt.Open(path, bolt.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return st, func() { st.Close() }
		}
	})
}
