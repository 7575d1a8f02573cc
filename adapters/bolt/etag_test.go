package bolt_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
)

// crashCopy copies the store file and its advance-log segments as a kill -9
// would leave them now: every commit is on disk, nothing kept in memory is.
func crashCopy(t *testing.T, path string) string {
	t.Helper()
	dir := t.TempDir()
	segs, err := filepath.Glob(path + ".wal.*")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(segs, path) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := "crashed.db" + strings.TrimPrefix(p, path)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "crashed.db")
}

func lastETag(t *testing.T, st *bolt.Store, r string) string {
	t.Helper()
	e, err := st.LastETag(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// The first record for an object marks it unknown in the file, durably;
// later records are memory only; a crash leaves the object unknown, a clean
// Close writes the last record, and a durable record survives a crash.
func TestETagsWrittenBehind(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fencegate.db")
	st, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.AdvanceFence(ctx, "r", 1, "a"); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordETag(ctx, "r", 1, "e1"); err != nil {
		t.Fatal(err)
	}
	// Changes, not Commits: the advance log's mark (markDelay after the
	// advance) is a commit that changes nothing, and lands whenever a
	// loaded machine lets it.
	changes := st.Stats().Changes
	for i := range 100 {
		st.RecordETag(ctx, "r", 1, fencegate.ETagUnknown)
		st.RecordETag(ctx, "r", 1, fmt.Sprintf("e%d", i+2))
	}
	if got := st.Stats().Changes; got != changes {
		t.Fatalf("%d changes committed for records of an owned object; want none", got-changes)
	}
	if got := lastETag(t, st, "r"); got != "e101" {
		t.Fatalf("LastETag = %q; want e101", got)
	}
	// An older token's record is ignored.
	st.RecordETag(ctx, "r", 0, "old")
	if got := lastETag(t, st, "r"); got != "e101" {
		t.Fatalf("LastETag after an older token's record = %q; want e101", got)
	}

	crashed, err := bolt.Open(crashCopy(t, path), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := lastETag(t, crashed, "r"); got != fencegate.ETagUnknown {
		t.Fatalf("after a crash LastETag = %q; want unknown", got)
	}
	crashed.Close()

	// A durable record is in the file at once.
	if err := st.RecordETagDurable(ctx, "r", 1, "refused"); err != nil {
		t.Fatal(err)
	}
	crashed, err = bolt.Open(crashCopy(t, path), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := lastETag(t, crashed, "r"); got != "refused" {
		t.Fatalf("durable record after a crash = %q; want refused", got)
	}
	crashed.Close()

	// Recorded again: owned again, unknown in the file again.
	st.RecordETag(ctx, "r", 1, "e200")
	crashed, err = bolt.Open(crashCopy(t, path), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := lastETag(t, crashed, "r"); got != fencegate.ETagUnknown {
		t.Fatalf("after a crash LastETag = %q; want unknown", got)
	}
	crashed.Close()

	// A clean Close writes the record.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := lastETag(t, st, "r"); got != "e200" {
		t.Fatalf("after Close LastETag = %q; want e200", got)
	}
	if _, err := st.LastETag(ctx, "none"); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordETag(ctx, "none", 1, "x"); err == nil {
		t.Fatal("RecordETag without a fence record succeeded")
	}
}

// Beyond ETagCache entries some are written to the file and forgotten;
// every object keeps its last record.
func TestETagCacheBound(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fencegate.db")
	st, err := bolt.Open(path, bolt.Options{ETagCache: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 50 {
		r := fmt.Sprintf("r%d", i)
		st.AdvanceFence(ctx, r, 1, "a")
		if err := st.RecordETag(ctx, r, 1, fencegate.ETagUnknown); err != nil {
			t.Fatal(err)
		}
		st.RecordETag(ctx, r, 1, "e-"+r)
	}
	crashed, err := bolt.Open(crashCopy(t, path), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer crashed.Close()
	forgotten := 0
	for i := range 50 {
		r := fmt.Sprintf("r%d", i)
		if got := lastETag(t, st, r); got != "e-"+r {
			t.Errorf("%s: LastETag = %q; want e-%s", r, got, r)
		}
		// After a crash: the record, or unknown; never another value.
		switch got := lastETag(t, crashed, r); got {
		case "e-" + r:
			forgotten++
		case fencegate.ETagUnknown:
		default:
			t.Errorf("%s after a crash: %q", r, got)
		}
	}
	if forgotten < 50-9 {
		t.Errorf("%d of 50 records written back; want all but the cache's", forgotten)
	}
}

// Concurrent marks, records and write-backs (a cache of 4 for 16 objects):
// at rest, the file holds each object's last record or unknown.
func TestETagsConcurrent(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fencegate.db")
	st, err := bolt.Open(path, bolt.Options{ETagCache: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const objects = 16
	for i := range objects {
		st.AdvanceFence(ctx, fmt.Sprintf("r%d", i), 1, "a")
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				r := fmt.Sprintf("r%d", (g+i)%objects)
				if err := st.RecordETag(ctx, r, 1, fencegate.ETagUnknown); err != nil {
					t.Error(err)
					return
				}
				rec := st.RecordETag
				if i%17 == 0 {
					rec = st.RecordETagDurable
				}
				if err := rec(ctx, r, 1, fmt.Sprintf("g%d-%d", g, i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	crashed, err := bolt.Open(crashCopy(t, path), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer crashed.Close()
	for i := range objects {
		r := fmt.Sprintf("r%d", i)
		want := lastETag(t, st, r)
		if got := lastETag(t, crashed, r); got != want && got != fencegate.ETagUnknown {
			t.Errorf("%s after a crash: %q; want %q or unknown", r, got, want)
		}
	}
}
