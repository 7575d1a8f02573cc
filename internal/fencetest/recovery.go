package fencetest

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/coordinator"
)

// RecoveryStore is what `fencegate fence export` and `import` need of a
// store (bolt and postgres).
type RecoveryStore interface {
	AdvanceFence(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error)
	ImportFences(ctx context.Context, recs []fencegate.FenceRecord) (int, error)
	ExportFences(ctx context.Context, fn func(fencegate.FenceRecord) error) error
}

// Sequence is the coordinator's token source on the same store.
type Sequence interface {
	RaiseSequence(ctx context.Context, token int64) error
	Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (coordinator.Lease, bool, error)
}

// RunExportImport is the export/import contract of a fresh store st and
// its lease records ls (nil: none, the RaiseSequence part is skipped;
// docs/recovery.md): the import max-merges (a lower
// record is ignored, a higher one raises, a new one is created), refuses a
// record without a resource, the export streams every record back in
// resource order, and RaiseSequence puts the next token above the imported
// fences without ever lowering the counter. It leaves fence b at 42 with
// an unknown ETag, for the store's own checks.
func RunExportImport(t *testing.T, st RecoveryStore, ls Sequence) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.AdvanceFence(ctx, "a", 10, "w10"); err != nil {
		t.Fatal(err)
	}
	n, err := st.ImportFences(ctx, []fencegate.FenceRecord{
		{Resource: "a", Highest: 5, Owner: "old", ETag: "?"}, // lower: ignored
		{Resource: "b", Highest: 42, Owner: "B", ETag: "?"},  // new
		{Resource: "c", Highest: 7, Owner: "C", ETag: "e7"},  // new
		{Resource: "c", Highest: 9, Owner: "C9", ETag: "e9"}, // raises the one before
	})
	if err != nil || n != 3 {
		t.Fatalf("ImportFences = %d, %v; want 3 raised", n, err)
	}
	if _, err := st.ImportFences(ctx, []fencegate.FenceRecord{{Resource: "", Highest: 1}}); err == nil {
		t.Fatal("import of a record without resource succeeded")
	}
	var got []fencegate.FenceRecord
	if err := st.ExportFences(ctx, func(r fencegate.FenceRecord) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []fencegate.FenceRecord{
		{Resource: "a", Highest: 10, Owner: "w10"},
		{Resource: "b", Highest: 42, Owner: "B", ETag: "?"},
		{Resource: "c", Highest: 9, Owner: "C9", ETag: "e9"},
	}
	if len(got) != len(want) {
		t.Fatalf("export = %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("export[%d] = %+v; want %+v", i, got[i], want[i])
		}
	}
	if ls == nil {
		return // a store without lease records (etcd)
	}
	for _, raise := range []int64{42, 3} { // the second must not lower it
		if err := ls.RaiseSequence(ctx, raise); err != nil {
			t.Fatal(err)
		}
	}
	if l, _, err := ls.Acquire(ctx, "b", "next", time.Minute); err != nil || l.Token != 43 {
		t.Fatalf("token after RaiseSequence(42) = %d, %v; want 43", l.Token, err)
	}
}
