package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

// TestMarkerLinger: a busy marker session (its last pipeline carried
// several writes) holds the next pipeline for more writes, so writes
// arriving 10 ms apart share one pipeline; a write on a quiet session
// goes out at once.
func TestMarkerLinger(t *testing.T) {
	const linger = time.Second
	fs, _ := replicas(t, 1, SharedFenceOptions{MarkerLinger: linger, DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
	f := fs[0]
	admit := func(tok int64) {
		t.Helper()
		p, err := f.Admit(context.Background(), gateway.Write{Resource: "linger", Token: tok})
		if err != nil {
			t.Error(err)
			return
		}
		p.Release()
	}
	admit(5) // the advance; the marker stays idle (sticky) for the next ones

	// Quiet: the last pipeline carried one write.
	start := time.Now()
	admit(5)
	if d := time.Since(start); d > linger/2 {
		t.Fatalf("a write on a quiet session took %v; it should not wait for company (linger %v)", d, linger)
	}

	// Busy: eight writes at once; some queue while another's pipeline is
	// on the wire, so a pipeline carries several. Busy is what the last
	// pipeline carried: a burst may end on a lone straggler.
	busy := func() bool {
		l := f.lanes[0]
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.sess != nil && l.sess.busy
	}
	var wg sync.WaitGroup
	for try := 0; !busy(); try++ {
		if try == 20 {
			t.Fatal("eight writes at once never left the session busy")
		}
		for range 8 {
			wg.Go(func() { admit(5) })
		}
		wg.Wait()
	}
	// Round trips, not statements: a pipeline carries up to three (an
	// unlock and a try-lock besides the read, when the marker was not kept
	// idle, e.g. while the drain listener is still connecting).
	before := f.RoundTrips()
	for i := range 5 {
		wg.Go(func() { admit(5) })
		if i < 4 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	wg.Wait()
	if got := f.RoundTrips() - before; got != 1 {
		t.Fatalf("five writes 10 ms apart on a busy session took %d round trips; want 1 (one pipeline)", got)
	}
}
