package bolt

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/internal/fencetest"
)

// Export and import on the embedded store: max-merge, streaming export in
// resource order, RaiseSequence above the imported fences (never lowering
// the counter), and an identity that survives reopening but not a new file.
func TestExportImportRaiseSequence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fencegate.db")
	ls := openLeases(t, path)
	st := ls.st
	ctx := context.Background()
	fencetest.RunExportImport(t, st, ls)
	// An ETag recorded by an older token than the imported fence is ignored.
	if err := st.RecordETag(ctx, "b", 41, "zombie"); err != nil {
		t.Fatal(err)
	}
	if e, _ := st.LastETag(ctx, "b"); e != "?" {
		t.Fatalf("LastETag after an older token's record = %q; want ?", e)
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
