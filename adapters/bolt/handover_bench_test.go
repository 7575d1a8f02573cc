package bolt_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/gateway"
	bbolt "go.etcd.io/bbolt"
)

// BenchmarkHandOver measures the embedded store on the workload users
// have: many writes per token, and an advance each time a lease changes
// owner. 64 writers, each on a resource of its own, send writes through a
// LocalFence as the gateway does; every N writes a writer's lease passes to
// the next owner (its token goes up by one: one durable advance). Two
// stores side by side:
//
//	advancelog  the shipped store (adapters/bolt: advance log, group
//	            commit, key filter, checkpoints into bbolt)
//	batch       the simpler alternative: bbolt alone, each advance one
//	            db.Batch (bbolt's own commit batching, two fsyncs per
//	            commit), reads through db.View
//
// Both run with the LocalFence's serving record off (the shipped default
// writes one into the advance log at the first write after a quiet spell;
// it does not change the per-advance cost measured here). docs/performance.md
// reports the figures.
//
//	go test -run '^$' -bench HandOver -benchtime 20000x -count 3 ./adapters/bolt/
func BenchmarkHandOver(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		for _, kind := range []string{"advancelog", "batch"} {
			b.Run(fmt.Sprintf("N=%d/%s", n, kind), func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "bench.db")
				var st gateway.Store
				switch kind {
				case "advancelog":
					s, err := bolt.Open(path, bolt.Options{})
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					st = s
				case "batch":
					s, err := openBatchStore(path)
					if err != nil {
						b.Fatal(err)
					}
					defer s.db.Close()
					st = s
				}
				benchHandOver(b, st, n)
			})
		}
	}
}

func benchHandOver(b *testing.B, st gateway.Store, n int) {
	const writers = 64
	fence := gateway.NewLocalFence(st, gateway.LocalFenceOptions{})
	ctx := context.Background()
	per := (b.N + writers - 1) / writers
	lat := make([][]time.Duration, writers)
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := fmt.Sprintf("/orders/%d", w)
			ls := make([]time.Duration, 0, per)
			for i := range per {
				t0 := time.Now()
				p, err := fence.Admit(ctx, gateway.Write{Resource: res, Token: int64(1 + i/n)})
				if err != nil {
					b.Error(err)
					return
				}
				p.Release()
				ls = append(ls, time.Since(t0))
			}
			lat[w] = ls
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(len(all))/secs, "writes/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(len(all)), "cpu-µs/op")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}

// batchStore is gateway.Store on bbolt alone: the alternative the advance
// log has to beat.
type batchStore struct{ db *bbolt.DB }

var batchBucket = []byte("fences")

func openBatchStore(path string) (*batchStore, error) {
	// The shipped store's file layout (bolt.go), so that only the commit
	// path differs.
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, InitialMmapSize: 256 << 20, NoFreelistSync: true,
		FreelistType: bbolt.FreelistMapType, NoStatistics: true})
	if err != nil {
		return nil, err
	}
	db.AllocSize = 16 << 20
	err = db.Update(func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(batchBucket)
		return err
	})
	return &batchStore{db: db}, err
}

func (s *batchStore) LoadFence(_ context.Context, resource string) (fencegate.FenceState, error) {
	st := fencegate.FenceState{Resource: resource}
	err := s.db.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(batchBucket).Get([]byte(resource)); len(v) == 8 {
			st.Highest = int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	st.Ready = true
	return st, err
}

func (s *batchStore) AdvanceFence(_ context.Context, resource string, token int64, owner string) (fencegate.FenceState, error) {
	st := fencegate.FenceState{Resource: resource, Owner: owner, Ready: true}
	err := s.db.Batch(func(tx *bbolt.Tx) error {
		bk := tx.Bucket(batchBucket)
		var cur int64
		if v := bk.Get([]byte(resource)); len(v) == 8 {
			cur = int64(binary.BigEndian.Uint64(v))
		}
		st.Highest = max(cur, token)
		if token <= cur {
			return nil
		}
		return bk.Put([]byte(resource), binary.BigEndian.AppendUint64(nil, uint64(token)))
	})
	return st, err
}
