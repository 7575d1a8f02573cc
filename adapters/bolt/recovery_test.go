package bolt

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// Export and import on the embedded store: max-merge, streaming export in
// resource order, RaiseSequence above the imported fences (never lowering
// the counter), and an identity that survives reopening but not a new file.
func TestExportImportRaiseSequence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fencegate.db")
	ls := openLeases(t, path)
	st := ls.st
	ctx := context.Background()
	if _, err := st.AdvanceFence(ctx, "a", 10, "w10"); err != nil {
		t.Fatal(err)
	}
	n, err := st.ImportFences(ctx, []fencegate.FenceRecord{
		{Resource: "a", Highest: 5, Owner: "old", ETag: "?"},
		{Resource: "b", Highest: 42, Owner: "B", ETag: "?"},
		{Resource: "c", Highest: 7, Owner: "C", ETag: "e7"},
		{Resource: "c", Highest: 9, Owner: "C9", ETag: "e9"},
	})
	if err != nil || n != 3 {
		t.Fatalf("ImportFences = %d, %v; want 3 raised", n, err)
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
	// An ETag recorded by an older token than the imported fence is ignored.
	if err := st.RecordETag(ctx, "b", 41, "zombie"); err != nil {
		t.Fatal(err)
	}
	if e, _ := st.LastETag(ctx, "b"); e != "?" {
		t.Fatalf("LastETag after an older token's record = %q; want ?", e)
	}
	for _, raise := range []int64{42, 3} {
		if err := ls.RaiseSequence(ctx, raise); err != nil {
			t.Fatal(err)
		}
	}
	l, _, err := ls.Acquire(ctx, "b", "next", time.Minute)
	if err != nil || l.Token != 43 {
		t.Fatalf("token after RaiseSequence(42) = %d, %v; want 43", l.Token, err)
	}

	id, _ := st.StoreID(ctx)
	st.Close()
	again := openLeases(t, path).st
	if id2, _ := again.StoreID(ctx); id2 != id || id == "" {
		t.Fatalf("StoreID after reopen = %q; want %q", id2, id)
	}
	other := openLeases(t, filepath.Join(t.TempDir(), "new.db")).st
	if id3, _ := other.StoreID(ctx); id3 == id {
		t.Fatal("a new store file has the old one's identity")
	}
}
