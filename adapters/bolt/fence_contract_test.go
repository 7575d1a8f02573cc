package bolt_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

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

// BenchmarkServingRecord is what the serving record costs a local fence
// on the embedded store (docs/operations.md): "repeated", 16 writers of a
// repeated token on 64 resources, the count of writes in flight being all
// it adds; "after-quiet", one write after the fence recorded itself quiet,
// which writes the busy record (one append and fdatasync of the advance
// log) before it returns. Each with the record (on) and without (off).
func BenchmarkServingRecord(b *testing.B) {
	for _, on := range []bool{false, true} {
		open := func(b *testing.B, quiet time.Duration) *gateway.LocalFence {
			st, err := bolt.Open(filepath.Join(b.TempDir(), "fencegate.db"), bolt.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			opts := gateway.LocalFenceOptions{QuietAfter: quiet}
			if on {
				opts.Serving = st
			}
			f := gateway.NewLocalFence(st, opts)
			if _, err := f.Begin(context.Background()); err != nil {
				b.Fatal(err)
			}
			return f
		}
		b.Run(fmt.Sprintf("repeated/record=%v", on), func(b *testing.B) {
			f := open(b, 0)
			ctx := context.Background()
			for i := range 64 {
				p, _ := f.Admit(ctx, gateway.Write{Resource: fmt.Sprint("/r/", i), Token: 1})
				p.Release()
			}
			var n atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, err := f.Admit(ctx, gateway.Write{Resource: fmt.Sprint("/r/", n.Add(1)%64), Token: 1})
					if err != nil {
						b.Error(err)
						return
					}
					p.Release()
				}
			})
		})
		b.Run(fmt.Sprintf("after-quiet/record=%v", on), func(b *testing.B) {
			f := open(b, time.Millisecond)
			ctx := context.Background()
			var spent time.Duration
			for i := range b.N {
				marks := f.QuiescenceMarks()
				for on && i > 0 && f.QuiescenceMarks() < marks+1 { // the quiet record
					time.Sleep(200 * time.Microsecond)
				}
				if !on {
					time.Sleep(2 * time.Millisecond)
				}
				start := time.Now()
				p, err := f.Admit(ctx, gateway.Write{Resource: "/q", Token: 1})
				if err != nil {
					b.Fatal(err)
				}
				spent += time.Since(start)
				p.Release()
			}
			b.ReportMetric(float64(spent.Microseconds())/float64(b.N), "µs/admit")
			b.ReportMetric(0, "ns/op")
		})
	}
}
