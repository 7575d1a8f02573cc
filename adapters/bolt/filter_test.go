package bolt

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// The filter has no false negatives: every key added, and every key of the
// file it was built from, may be there.
func TestKeyFilterNoFalseNegatives(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "fencegate.db"))
	defer st.Close()
	f := st.known
	absent := 0
	for i := range 100000 {
		k := fmt.Sprintf("/orders/%d", i)
		if !f.mayHave(k) {
			absent++
		}
		f.add(k)
		if !f.mayHave(k) {
			t.Fatalf("%s added, then reported absent", k)
		}
	}
	// 1 MiB for 100,000 keys: 84 bits each, a false positive rate far
	// below 1%.
	if absent < 99000 {
		t.Errorf("%d of 100000 new keys reported absent; want nearly all", absent)
	}
}

// Records written into the file by another process (a store copied in, a
// `fence import` of an older version) are found: the filter is built from
// the file at Open, and an advance below them neither lowers nor replaces
// them.
func TestKeyFilterBuiltAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fencegate.db")
	openStore(t, path).Close()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for i := range 1000 {
			v := fmt.Sprintf(`{"highest":50,"owner":"old","etag":"\"e%d\"","etag_token":50,"updated_at":"%s"}`, i, time.Now().UTC().Format(time.RFC3339Nano))
			if err := tx.Bucket(bucketFences).Put([]byte(fmt.Sprintf("/raw/%d", i)), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t, path)
	ctx := context.Background()
	for i := range 1000 {
		k := fmt.Sprintf("/raw/%d", i)
		if got := highest(t, st, k); got != 50 {
			t.Fatalf("%s: highest %d; want 50", k, got)
		}
		f, err := st.AdvanceFence(ctx, k, 10+int64(i%2)*90, "new") // 10: below; 100: above
		if err != nil {
			t.Fatal(err)
		}
		if want := []int64{50, 100}[i%2]; f.Highest != want {
			t.Fatalf("%s: advance answered highest %d; want %d", k, f.Highest, want)
		}
	}
	st.Close() // checkpoints the advances
	st = openStore(t, path)
	defer st.Close()
	for i := range 1000 {
		k := fmt.Sprintf("/raw/%d", i)
		f, err := st.LoadFence(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if want := []int64{50, 100}[i%2]; f.Highest != want || f.ETag != fmt.Sprintf(`"e%d"`, i) {
			t.Fatalf("%s after the checkpoint: highest %d, ETag %s; want %d and the ETag kept", k, f.Highest, f.ETag, want)
		}
	}
}

// A new resource is answered from the log's overlay alone, before and after
// its checkpoint (which adds it to the filter), and after a crash copy
// (the filter is rebuilt from the file, the log replayed).
func TestKeyFilterNewResourceThroughCheckpoint(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "fencegate.db"))
	ctx := context.Background()
	if got := highest(t, st, "/new"); got != 0 {
		t.Fatalf("unknown resource: highest %d; want 0", got)
	}
	if _, err := st.AdvanceFence(ctx, "/new", 7, "o"); err != nil {
		t.Fatal(err)
	}
	if st.known.mayHave("/new") {
		t.Log("false positive for /new (rare): the bbolt path is taken instead")
	}
	if got := highest(t, st, "/new"); got != 7 {
		t.Fatalf("logged only: highest %d; want 7", got)
	}
	crash := crashCopy(t, st)
	if err := st.log.checkpoint(nil); err != nil {
		t.Fatal(err)
	}
	if !st.known.mayHave("/new") {
		t.Fatal("checkpointed /new is not in the filter")
	}
	if got := highest(t, st, "/new"); got != 7 {
		t.Fatalf("checkpointed: highest %d; want 7", got)
	}
	if f, err := st.AdvanceFence(ctx, "/new", 6, "o"); err != nil || f.Highest != 7 {
		t.Fatalf("advance to 6 after the checkpoint: %v, %v; want highest 7", f.Highest, err)
	}
	st.Close()
	c := openStore(t, crash)
	defer c.Close()
	if got := highest(t, c, "/new"); got != 7 {
		t.Fatalf("crash copy: highest %d; want 7", got)
	}
}
