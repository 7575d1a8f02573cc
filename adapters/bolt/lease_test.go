package bolt

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/coordinator/coordinatortest"
)

func TestLeaseContract(t *testing.T) {
	coordinatortest.Run(t, coordinatortest.Harness{
		New: func(t *testing.T) coordinator.Backend {
			return openLeases(t, filepath.Join(t.TempDir(), "fencegate.db"))
		},
		Reopen: func(t *testing.T, b coordinator.Backend) coordinator.Backend {
			st := b.(*Leases).st
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			return openLeases(t, st.Path())
		},
		FailAfterDraw: func(t *testing.T, b coordinator.Backend) func() int64 {
			ls := b.(*Leases)
			var mu sync.Mutex
			var drawn int64
			ls.failAfterDraw = func(token int64) error {
				mu.Lock()
				defer mu.Unlock()
				drawn = max(drawn, token)
				return errors.New("injected failure after the token was drawn")
			}
			return func() int64 {
				mu.Lock()
				defer mu.Unlock()
				ls.failAfterDraw = nil
				return drawn
			}
		},
	})
}

func openLeases(t *testing.T, path string) *Leases {
	t.Helper()
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return NewLeases(st)
}
