package gateway_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/recorder"
)

// A small body is read whole before the fence (one write upstream); these
// check that nothing of the fence's guarantees moved with it.

func TestSmallBodyForwardedWhole(t *testing.T) {
	g := newTestGateway(t, ordersRoute)
	for _, n := range []int{1, 512, 32 << 10, 32<<10 + 1, 1 << 20} {
		body := strings.Repeat("b", n)
		if st, resp := do(t, "PUT", g.URL+"/orders/w", tok("7"), body); st != 200 {
			t.Fatalf("%d bytes: %d %s", n, st, resp)
		}
		h := g.rec.HistoryOf("/orders/w")
		if got := h[len(h)-1].Value; got != body {
			t.Fatalf("%d bytes: upstream got %d bytes", n, len(got))
		}
	}
}

// TestSmallBodyShort: a client that sends less than its Content-Length is
// answered 400, and neither the upstream nor the fence saw the write.
func TestSmallBodyShort(t *testing.T) {
	g := newTestGateway(t, ordersRoute)
	c, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("PUT /orders/short HTTP/1.1\r\nHost: x\r\nFencing-Token: 9\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("s", 50)))
	c.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("short body answered %d; want 400", resp.StatusCode)
	}
	if h := g.rec.HistoryOf("/orders/short"); len(h) != 0 {
		t.Fatalf("upstream applied %s", recorder.Summary(h))
	}
	if st, _ := g.fence.State(t.Context(), "/orders/short"); st.Highest != 0 {
		t.Fatalf("fence advanced to %d by a write never forwarded", st.Highest)
	}
}

// TestSmallBodyDrains: an older write whose small body is already with the
// upstream is not cut by a newer token; the newer write waits for it (I2),
// so the upstream applies them in token order.
func TestSmallBodyDrains(t *testing.T) {
	g := newTestGateway(t, ordersRoute)
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	g.rec.Delay = func(r *http.Request) {
		if r.Header.Get("Fencing-Token") == "41" {
			arrived <- struct{}{}
			<-release
		}
	}
	aDone := make(chan int)
	go func() {
		st, _ := do(t, "PUT", g.URL+"/orders/d", tok("41"), "A")
		aDone <- st
	}()
	<-arrived
	bDone := make(chan int)
	go func() {
		st, _ := do(t, "PUT", g.URL+"/orders/d", tok("42"), "B")
		bDone <- st
	}()
	// B advances the fence, then waits for A.
	for {
		if st, _ := g.fence.State(t.Context(), "/orders/d"); st.Highest == 42 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if a, b := <-aDone, <-bDone; a != 200 || b != 200 {
		t.Fatalf("A %d, B %d; want both 200", a, b)
	}
	if got := recorder.Summary(g.rec.HistoryOf("/orders/d")); got != "PUT A@41, PUT B@42" {
		t.Fatalf("upstream applied %q; want A then B", got)
	}
}
