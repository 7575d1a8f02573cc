package telemetry

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

func TestRefusalsRing(t *testing.T) {
	b := NewRefusals(3)
	ctx := context.Background()
	b.Observe(ctx, &gateway.Outcome{Decision: "forwarded", Resource: "/x"})
	b.Observe(ctx, &gateway.Outcome{Decision: "client_closed", Resource: "/x"})
	if got := b.Recent(); len(got) != 0 {
		t.Fatalf("forwarded and client_closed recorded: %v", got)
	}
	for i := range 5 {
		b.Observe(ctx, &gateway.Outcome{Decision: fencegate.CodeStaleToken, Resource: fmt.Sprint(i), Token: int64(i)})
	}
	got := b.Recent()
	if len(got) != 3 || got[0].Resource != "4" || got[2].Resource != "2" || got[0].Code != fencegate.CodeStaleToken {
		t.Fatalf("Recent = %+v; want 4, 3, 2 (newest first)", got)
	}
	if b.Total() != 5 || b.Cap() != 3 {
		t.Errorf("Total, Cap = %d, %d; want 5, 3", b.Total(), b.Cap())
	}
}

// TestRefusalsConcurrent is for -race: writers never wait, and a reader
// racing them sees whole records.
func TestRefusalsConcurrent(t *testing.T) {
	b := NewRefusals(64)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				b.Add(Refusal{Resource: fmt.Sprint(w), Token: int64(i), Code: "stale_fencing_token"})
			}
		}()
	}
	for range 100 {
		for _, r := range b.Recent() {
			if r.Code != "stale_fencing_token" {
				t.Fatalf("torn record %+v", r)
			}
		}
	}
	wg.Wait()
	if got := len(b.Recent()); got != 64 || b.Total() != 16000 {
		t.Fatalf("kept %d of %d; want 64 of 16000", got, b.Total())
	}
}

// BenchmarkRefusalsObserve is the cost the ring adds to a refusal (the
// refusal path itself, with its JSON answer and log line, is
// BenchmarkRefusal in bench/).
func BenchmarkRefusalsObserve(b *testing.B) {
	r := NewRefusals(DefaultRecentRefusals)
	o := &gateway.Outcome{Route: "orders", Decision: fencegate.CodeStaleToken, Resource: "/orders/1", Token: 3, Highest: 7}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Observe(ctx, o)
		}
	})
}
