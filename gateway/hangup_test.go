package gateway_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/recorder"
)

// TestHangupHoldsWriteInFlight: a client that gives up on its admitted
// write (its own HTTP client's context ends) leaves the write in flight
// until the upstream is done with it, so a newer token's write waits for
// it; with the answer still to come, and with the answer's head already
// sent while the upstream still works.
func TestHangupHoldsWriteInFlight(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		name := "answer_pending"
		if streaming {
			name = "answer_streaming"
		}
		t.Run(name, func(t *testing.T) {
			rec := &recorder.Recorder{}
			held, release := make(chan struct{}), make(chan struct{})
			g := newTestGatewayFor(t, ordersRoute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Fencing-Token") == "41" {
					b, _ := io.ReadAll(r.Body)
					r.Body = io.NopCloser(bytes.NewReader(b))
					if streaming {
						w.WriteHeader(http.StatusOK)
						io.WriteString(w, "applying\n")
						http.NewResponseController(w).Flush()
					}
					close(held)
					<-release
				}
				rec.ServeHTTP(w, r)
			}))
			var once sync.Once
			unblock := func() { once.Do(func() { close(release) }) }
			t.Cleanup(unblock) // before the servers close: a failure must not leave the upstream waiting
			ctx, cancel := context.WithCancel(context.Background())
			aDone := make(chan error, 1)
			go func() {
				req, _ := http.NewRequestWithContext(ctx, "PUT", g.URL+"/orders/h", bytes.NewReader([]byte("A")))
				req.Header.Set("Fencing-Token", "41")
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				aDone <- err
			}()
			<-held
			cancel() // A's client gives up; its connection is closed
			if err := <-aDone; err == nil {
				t.Fatal("A's request succeeded; want it cancelled")
			}
			// However long the gateway takes to notice, A stays in flight.
			for range 20 {
				if n := g.fence.InFlight("/orders/h"); n != 1 {
					t.Fatalf("A's write in flight: %d; want 1 while the upstream works", n)
				}
				time.Sleep(10 * time.Millisecond)
			}
			bDone := make(chan int, 1)
			go func() {
				st, _ := do(t, "PUT", g.URL+"/orders/h", tok("42"), "B")
				bDone <- st
			}()
			select {
			case st := <-bDone:
				t.Fatalf("B's write answered %d while A's was still with the upstream", st)
			case <-time.After(200 * time.Millisecond):
			}
			unblock()
			if st := <-bDone; st != 200 {
				t.Fatalf("B's write: %d", st)
			}
			if got := recorder.Summary(rec.HistoryOf("/orders/h")); got != "PUT A@41, PUT B@42" {
				t.Fatalf("upstream applied %q; want A's write, then B's", got)
			}
		})
	}
}
