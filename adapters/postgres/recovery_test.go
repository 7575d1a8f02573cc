package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Export and import on PostgreSQL: the import max-merges (never lowers a
// fence, the trigger would refuse it anyway), the export streams every
// record back, and RaiseSequence puts the next token above the imported
// fences without ever lowering the sequence.
func TestExportImportRaiseSequence(t *testing.T) {
	pg := testenv.Postgres(t)
	st := openFenceStore(t, pg.URL, Options{})
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

	ls := NewLeases(st)
	for _, raise := range []int64{42, 3} { // the second must not lower it
		if err := ls.RaiseSequence(ctx, raise); err != nil {
			t.Fatal(err)
		}
	}
	l, _, err := ls.Acquire(ctx, "b", "next", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token != 43 {
		t.Fatalf("token after RaiseSequence(42) = %d; want 43", l.Token)
	}
	// A fresh sequence (is_called false) raised to exactly its start value:
	// the next token must still be above it.
	fresh := NewLeases(openFenceStore(t, testenv.Postgres(t).URL, Options{}))
	if err := fresh.RaiseSequence(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if l, _, err := fresh.Acquire(ctx, "x", "o", time.Minute); err != nil || l.Token != 2 {
		t.Fatalf("first token after RaiseSequence(1) on a fresh sequence = %d, %v; want 2", l.Token, err)
	}
	id, err := st.StoreID(ctx)
	if err != nil || len(id) != 32 {
		t.Fatalf("StoreID = %q, %v", id, err)
	}
}
