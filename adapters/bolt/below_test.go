package bolt_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
)

// TestBelow: HighestBelow reads the fences below a prefix (logged and
// checkpointed, a sibling sharing the prefix's bytes but not its '/' left
// out), and ForgetETagsBelow makes the ETag records below it unknown,
// durably (still so after a reopen), leaving others alone.
func TestBelow(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	st, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for res, tok := range map[string]int64{"/d/c": 3, "/d/c/m": 9, "/d/c/n/deep": 7, "/d/cx": 20} {
		if _, err := st.AdvanceFence(ctx, res, tok, "w"); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := st.HighestBelow(ctx, "/d/c/"); err != nil || got != 9 {
		t.Fatalf("HighestBelow(/d/c/) = %d, %v; want 9", got, err)
	}
	if got, err := st.HighestBelow(ctx, "/e/"); err != nil || got != 0 {
		t.Fatalf("HighestBelow(/e/) = %d, %v; want 0", got, err)
	}
	if err := st.RecordETag(ctx, "/d/c/m", 9, "e9"); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordETagDurable(ctx, "/d/c/n/deep", 7, "e7"); err != nil { // in the file, not owned
		t.Fatal(err)
	}
	if err := st.RecordETag(ctx, "/d/cx", 20, "ex"); err != nil {
		t.Fatal(err)
	}
	if err := st.ForgetETagsBelow(ctx, "/d/c/", 10); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for res, want := range map[string]string{"/d/c/m": fencegate.ETagUnknown, "/d/c/n/deep": fencegate.ETagUnknown} {
			if got, err := st.LastETag(ctx, res); err != nil || got != want {
				t.Fatalf("%s: LastETag(%s) = %q, %v; want %q", when, res, got, err, want)
			}
		}
	}
	check("after ForgetETagsBelow")
	if got, _ := st.LastETag(ctx, "/d/cx"); got != "ex" {
		t.Fatalf("LastETag(/d/cx) = %q; a sibling outside the prefix must keep its record", got)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err = bolt.Open(path, bolt.Options{}); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	check("after a reopen")
	if got, err := st.HighestBelow(ctx, "/d/c/"); err != nil || got != 9 {
		t.Fatalf("after a reopen, HighestBelow(/d/c/) = %d, %v; want 9", got, err)
	}
}
