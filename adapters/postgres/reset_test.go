package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// RaiseTokens racing with takeovers never sets the sequence back under a
// token drawn meanwhile (no token twice, no guard refusal), and a reset
// racing with them never lowers a fence below a token issued.
func TestRaiseTokensAndResetRacingAcquires(t *testing.T) {
	ctx := context.Background()
	ls := openTestLeases(t, testenv.Postgres(t).URL)
	st := ls.st
	var (
		mu  sync.Mutex
		got = map[int64]bool{}
		wg  sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				l, _, err := ls.Acquire(ctx, fmt.Sprintf("/race/%d", i%3), fmt.Sprintf("w%d-%d", w, i), time.Millisecond)
				if err == nil {
					mu.Lock()
					if got[l.Token] {
						t.Errorf("token %d issued twice", l.Token)
					}
					got[l.Token] = true
					mu.Unlock()
				}
			}
		}()
	}
	for i := range 20 {
		if err := ls.RaiseSequence(ctx, int64(100*(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	l, _, err := ls.Acquire(ctx, "/after", "o", time.Minute)
	if err != nil || l.Token <= 2000 {
		t.Fatalf("token after RaiseTokens(2000): %d %v", l.Token, err)
	}
	// Reset: refused below the issued token, allowed at it.
	if _, err := st.AdvanceFence(ctx, "/after", l.Token+500, "typo"); err != nil {
		t.Fatal(err)
	}
	var rb *fencegate.ResetBelowIssuedError
	if _, err := st.ResetFence(ctx, "/after", l.Token-1, "ops"); !errors.As(err, &rb) || rb.To != l.Token-1 || rb.Issued != l.Token {
		t.Fatalf("reset below the issued token: %v", err)
	}
	fs, err := st.ResetFence(ctx, "/after", l.Token, "ops")
	if err != nil || fs.Highest != l.Token {
		t.Fatalf("reset: %+v %v", fs, err)
	}
	next, _, err := ls.Acquire(ctx, "/other", "o", time.Minute)
	if err != nil || next.Token <= l.Token {
		t.Fatalf("next token %d after a reset to %d: %v", next.Token, l.Token, err)
	}
}
