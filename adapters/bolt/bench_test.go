package bolt_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/bolt"
	bbolt "go.etcd.io/bbolt"
)

// BenchmarkAdvance: 32 writers per core, each advancing the fence of a new
// resource (one durable change per write), on an empty store and on one
// that already holds a million fences with random names (each advance
// then lands in a leaf page of its own).
func BenchmarkAdvance(b *testing.B) {
	parent := b
	b.Run("empty", func(b *testing.B) {
		benchAdvance(b, filepath.Join(b.TempDir(), "bench.db"))
	})
	var big string // built once per run of BenchmarkAdvance, removed after it
	b.Run("1M", func(b *testing.B) {
		if big == "" {
			big = prefilled(b, filepath.Join(parent.TempDir(), "1M.db"))
		}
		path := filepath.Join(b.TempDir(), "bench.db")
		copyFile(b, big, path)
		benchAdvance(b, path)
	})
}

func benchAdvance(b *testing.B, path string) {
	st, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var next atomic.Int64
	ctx := context.Background()
	prefix := fmt.Sprintf("/orders/%x/", rand.Uint64())
	b.SetParallelism(32)
	before, cpu0 := st.Stats(), cpuTime()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			// Random names: each lands in its own leaf page.
			if _, err := st.AdvanceFence(ctx, fmt.Sprintf("%s%x", prefix, rand.Uint64()^uint64(next.Add(1))), 42, "bench"); err != nil {
				b.Error(err)
				return
			}
		}
	})
	secs := time.Since(start).Seconds()
	after := st.Stats()
	b.ReportMetric(float64(b.N)/secs, "writes/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	if syncs := float64(after.Syncs - before.Syncs); syncs > 0 {
		b.ReportMetric(syncs/secs, "fsyncs/s")
		b.ReportMetric(float64(b.N)/syncs, "writes/fsync")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// prefilled writes a store file with 1M fences of random names at path.
func prefilled(b *testing.B, path string) string {
	st, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	st.Close()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.NoSync = true
	for range 1000 {
		err := db.Update(func(tx *bbolt.Tx) error {
			bk := tx.Bucket([]byte("fences"))
			for range 1000 {
				k := fmt.Sprintf("/orders/%016x", rand.Uint64())
				v := fmt.Sprintf(`{"highest":42,"owner":"bench","updated_at":"%s"}`, time.Now().UTC().Format(time.RFC3339Nano))
				if err := bk.Put([]byte(k), []byte(v)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Sync(); err != nil {
		b.Fatal(err)
	}
	return path
}

func copyFile(b *testing.B, from, to string) {
	in, err := os.Open(from)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLoadFence: the read of a resource the store has no record of
// (what the fence does for every new resource before its advance), and of
// one it has.
func BenchmarkLoadFence(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bench.db")
	st, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := st.AdvanceFence(ctx, "/orders/known", 42, "bench"); err != nil {
		b.Fatal(err)
	}
	st.Close() // the record is in bbolt, not only in the log
	if st, err = bolt.Open(path, bolt.Options{}); err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for _, name := range []string{"absent", "known"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				res := "/orders/known"
				if name == "absent" {
					res = "/orders/absent/" + strconv.Itoa(i)
				}
				if _, err := st.LoadFence(ctx, res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
