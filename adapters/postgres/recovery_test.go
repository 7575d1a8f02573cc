package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/fencetest"
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
	fencetest.RunExportImport(t, st, NewLeases(st))

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
