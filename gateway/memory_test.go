package gateway_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// nullStore remembers nothing: every resource is new to it, and the heap
// measured is the fence's alone.
type nullStore struct{}

func (nullStore) LoadFence(ctx context.Context, r string) (fencegate.FenceState, error) {
	return fencegate.FenceState{}, nil
}

func (nullStore) AdvanceFence(ctx context.Context, r string, token int64, owner string) (fencegate.FenceState, error) {
	return fencegate.FenceState{Resource: r, Highest: token, Owner: owner}, nil
}

// BenchmarkLocalFenceMemory reports the live heap of a local fence's cache
// per cached resource (B/entry) and for the default bound of 100,000
// entries (MiB/cache), with keys like "/orders/12345" (docs/performance.md).
// Each op admits a write to a new resource.
func BenchmarkLocalFenceMemory(b *testing.B) {
	const max = 100000
	f := gateway.NewLocalFence(nullStore{}, gateway.LocalFenceOptions{MaxEntries: max})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p, err := f.Admit(context.Background(), gateway.Write{Resource: "/orders/" + strconv.Itoa(i), Token: 1})
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := gateway.CachedEntries(f)
	if n > max+64 {
		b.Fatalf("cache holds %d entries; bound is %d", n, max)
	}
	perEntry := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	b.ReportMetric(perEntry, "B/entry")
	b.ReportMetric(perEntry*max/(1<<20), "MiB/100k")
}
