package bolt

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// RaiseTokens never lowers the counter, also racing with acquisitions, and
// the next token is above the raised value.
func TestRaiseTokens(t *testing.T) {
	ctx := context.Background()
	ls := openLeases(t, filepath.Join(t.TempDir(), "fencegate.db"))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var got []int64
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				l, _, err := ls.Acquire(ctx, "/r/"+string(rune('a'+i))+string(rune('a'+j)), "o", time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, l.Token)
				mu.Unlock()
			}
		}()
	}
	if err := ls.RaiseSequence(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if err := ls.RaiseSequence(ctx, 10); err != nil { // lower: no effect
		t.Fatal(err)
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, tok := range got {
		if seen[tok] {
			t.Fatalf("token %d issued twice", tok)
		}
		seen[tok] = true
	}
	l, _, err := ls.Acquire(ctx, "/after", "o", time.Minute)
	if err != nil || l.Token <= 1000 {
		t.Fatalf("token after RaiseTokens(1000): %d %v", l.Token, err)
	}
}

func TestResetFence(t *testing.T) {
	ctx := context.Background()
	ls := openLeases(t, filepath.Join(t.TempDir(), "fencegate.db"))
	st := ls.st
	if err := ls.RaiseSequence(ctx, 10); err != nil {
		t.Fatal(err)
	}
	l, _, err := ls.Acquire(ctx, "/r", "A", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AdvanceFence(ctx, "/r", 5000, "typo"); err != nil {
		t.Fatal(err)
	}
	var rb *fencegate.ResetBelowIssuedError
	if _, err := st.ResetFence(ctx, "/r", l.Token-1, "ops"); !errors.As(err, &rb) || rb.To != l.Token-1 || rb.Issued != l.Token {
		t.Fatalf("reset below the issued token: %v", err)
	}
	fs, err := st.ResetFence(ctx, "/r", l.Token+10, "ops")
	if err != nil || fs.Highest != l.Token+10 {
		t.Fatalf("reset: %+v %v", fs, err)
	}
	// Raise-only, as always, for everyone else; the counter is above the reset.
	if fs, _ := st.AdvanceFence(ctx, "/r", 3, "late"); fs.Highest != l.Token+10 {
		t.Fatalf("advance lowered the fence: %+v", fs)
	}
	if _, err := ls.Release(ctx, "/r", "A", l.Token); err != nil {
		t.Fatal(err)
	}
	next, _, err := ls.Acquire(ctx, "/r", "B", time.Minute)
	if err != nil || next.Token <= l.Token+10 {
		t.Fatalf("next lease %d is not above the reset value %d (%v)", next.Token, l.Token+10, err)
	}
	// At or below `to` already: unchanged.
	if fs, err := st.ResetFence(ctx, "/r", next.Token+100, "ops"); err != nil || fs.Highest != l.Token+10 {
		t.Fatalf("reset above the fence changed it: %+v %v", fs, err)
	}
}

// A reset lowers the ETag record's token with the fence (the version it
// names kept): left at the mistaken token's, every record of the new
// value's writes would be refused, and the holder's second write made
// conditional on a version its first replaced. Read back after reopening
// the file.
func TestResetLowersETagToken(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fencegate.db")
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const res = "/reset/etag"
	if _, err := st.AdvanceFence(ctx, res, 900, "typo"); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordETag(ctx, res, 900, `"e900"`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ResetFence(ctx, res, 5, "ops"); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordETag(ctx, res, 5, `"e5"`); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got, err := st.LastETag(ctx, res); err != nil || got != `"e5"` {
		t.Fatalf("ETag after the reset to 5 and a write of 5: %q %v; want \"e5\"", got, err)
	}
}
