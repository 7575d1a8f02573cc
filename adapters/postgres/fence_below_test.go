package postgres

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestBelow: HighestBelow reads the fences below a prefix in byte order
// (a sibling sharing the prefix's bytes but not its '/' left out), and
// ForgetETagsBelow makes the ETag records below it unknown, others kept.
func TestBelow(t *testing.T) {
	pg := testenv.Postgres(t)
	st := openFenceStore(t, pg.URL, Options{})
	ctx := context.Background()
	for res, tok := range map[string]int64{"/d/c": 3, "/d/c/m": 9, "/d/c/n/deep": 7, "/d/cx": 20, "/d/c0": 30} {
		if _, err := st.AdvanceFence(ctx, res, tok, "w"); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := st.HighestBelow(ctx, "/d/c/"); err != nil || got != 9 {
		t.Fatalf("HighestBelow(/d/c/) = %d, %v; want 9", got, err)
	}
	for res, etag := range map[string]string{"/d/c/m": "e9", "/d/cx": "ex", "/d/c0": "e0"} {
		if err := st.RecordETag(ctx, res, 9, etag); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.ForgetETagsBelow(ctx, "/d/c/", 10); err != nil {
		t.Fatal(err)
	}
	for res, want := range map[string]string{"/d/c/m": fencegate.ETagUnknown, "/d/cx": "ex", "/d/c0": "e0"} {
		if got, err := st.LastETag(ctx, res); err != nil || got != want {
			t.Fatalf("LastETag(%s) = %q, %v; want %q", res, got, err, want)
		}
	}
}
