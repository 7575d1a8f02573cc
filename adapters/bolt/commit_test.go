package bolt

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	bbolt "go.etcd.io/bbolt"
)

// Changes queued while a commit is on its way share the next commit; one
// that fails gets its error and the others are committed without it.
func TestCommitterBatchesAndIsolatesFailures(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "fencegate.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	first := st.commit.submit(func(tx *bbolt.Tx) error {
		select {
		case <-started:
		default:
			close(started)
		}
		<-release
		return nil
	})
	<-started
	put := func(k string) func(tx *bbolt.Tx) error {
		return func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put([]byte(k), []byte("v")) }
	}
	bad := errors.New("bad change")
	a := st.commit.submit(put("a"))
	b := st.commit.submit(func(tx *bbolt.Tx) error {
		tx.Bucket(bucketMeta).Put([]byte("b"), []byte("v"))
		return bad
	})
	c := st.commit.submit(put("c"))
	before := st.Stats()
	close(release)
	if err := first.wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.wait(ctx); err != nil {
		t.Fatalf("a: %v", err)
	}
	if err := b.wait(ctx); !errors.Is(err, bad) {
		t.Fatalf("b: %v; want its own error", err)
	}
	if err := c.wait(ctx); err != nil {
		t.Fatalf("c: %v", err)
	}
	after := st.Stats()
	if got := after.Commits - before.Commits; got != 2 {
		t.Errorf("%d commits; want 2 (the first, then a and c together)", got)
	}
	if got := after.Changes - before.Changes; got != 3 {
		t.Errorf("%d changes committed; want 3", got)
	}
	st.db.View(func(tx *bbolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if m.Get([]byte("a")) == nil || m.Get([]byte("c")) == nil || m.Get([]byte("b")) != nil {
			t.Errorf("a %q b %q c %q; want a and c only", m.Get([]byte("a")), m.Get([]byte("b")), m.Get([]byte("c")))
		}
		return nil
	})
	// After Close nothing is queued any more.
	st.Close()
	if err := st.commit.do(ctx, put("d")); !errors.Is(err, ErrClosed) {
		t.Fatalf("change after Close: %v; want ErrClosed", err)
	}
}
