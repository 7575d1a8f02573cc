package bolt_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/bolt"
)

// BenchmarkAdvance: 32 writers per core, each advancing the fence of a new
// resource (one durable change per write).
func BenchmarkAdvance(b *testing.B) {
	st, err := bolt.Open(filepath.Join(b.TempDir(), "bench.db"), bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var next atomic.Int64
	ctx := context.Background()
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := st.AdvanceFence(ctx, fmt.Sprintf("/orders/%d", next.Add(1)), 42, "bench"); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "writes/s")
}
