package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// fastPathYAML turns the HTTP/1.1 fast path on in a gateway config.
func fastPathYAML(yaml string) string {
	return strings.Replace(yaml, "  listen: $GATEWAY\n", "  listen: $GATEWAY\n  fast_path: true\n", 1)
}

// Through a gateway with the fast path on, the Go GCS client's upload (a
// multipart body it sends chunked) lands with its stamp, and a chunked
// upload's trailer is never read as its token: a token only in the
// trailer is refused, one in the trailer beside the header's is ignored.
// The fast path serves all of it: at the end, a goroutine dump of the
// gateway (SIGQUIT) shows the client's and the raw connection held by
// the fast path's connections, none by net/http's server (the connection
// of a request the fast path hands over is net/http's from then on).
func TestGCSFastPathChunkedUpload(t *testing.T) {
	srv := testenv.FakeGCS(t)
	srv.CreateBucket(t, gcsBucket)
	p := startFencegate(t, fastPathYAML(s3GatewayYAML(gcsRouteYAML("objects", "", srv.Endpoint, "", "30s"))), "GOTRACEBACK=all")
	e := &gcsEnv{GCS: srv, Proc: p, GW: p.URL("gateway")}

	var token atomic.Int64
	token.Store(7)
	body := strings.Repeat("x", 4<<10)
	if err := gcsPut(e.worker(t, &token), "client", body, 0); err != nil {
		t.Fatalf("client upload: %v", err)
	}
	if got, stamp := e.stored(t, "client"); got != body || stamp != "7" {
		t.Fatalf("stored %.20q (%d bytes) stamp %q; want the upload stamped 7", got, len(got), stamp)
	}

	// Raw chunked multipart uploads on one connection, trailers not
	// declared (a declared Fencing-Token trailer is refused before the
	// body; that shape is net/http's on the fast path).
	c, err := net.Dial("tcp", strings.TrimPrefix(e.GW, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	upload := func(object, header, trailer string) (int, string) {
		t.Helper()
		const boundary = "fencegate-boundary"
		mp := "--" + boundary + "\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n" +
			`{"name":"` + object + `"}` + "\r\n--" + boundary + "\r\nContent-Type: text/plain\r\n\r\n" +
			"raw " + object + "\r\n--" + boundary + "--\r\n"
		var chunks strings.Builder
		for len(mp) > 0 { // chunks of 100 bytes, as a streaming client sends
			n := min(len(mp), 100)
			fmt.Fprintf(&chunks, "%x\r\n%s\r\n", n, mp[:n])
			mp = mp[n:]
		}
		req := "POST /upload/storage/v1/b/" + gcsBucket + "/o?uploadType=multipart&name=" + object + " HTTP/1.1\r\nHost: gw\r\n" +
			"Authorization: Bearer " + gcsWorkerKey + "\r\nContent-Type: multipart/related; boundary=" + boundary + "\r\n" +
			header + "Transfer-Encoding: chunked\r\n\r\n" + chunks.String() + "0\r\n" + trailer + "\r\n"
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.Close {
			t.Fatalf("%s: the gateway closed the connection after %d %s", object, res.StatusCode, b)
		}
		return res.StatusCode, string(b)
	}
	if st, b := upload("both", "Fencing-Token: 7\r\n", "Fencing-Token: 99\r\n"); st != http.StatusOK {
		t.Fatalf("token in the header and the trailer: %d %s", st, b)
	}
	if got, stamp := e.stored(t, "both"); got != "raw both" || stamp != "7" {
		t.Fatalf("stored %q stamp %q; want raw both stamped 7 (the header's token, not the trailer's)", got, stamp)
	}
	if st, b := upload("trailer-only", "", "Fencing-Token: 99\r\n"); st < 400 || st > 499 {
		t.Fatalf("token only in the trailer: %d %s; want a refusal", st, b)
	}
	if got, _ := e.stored(t, "trailer-only"); got != "<absent>" {
		t.Fatalf("a write whose token is only in its trailer was stored: %q", got)
	}

	// Which server holds the two idle connections.
	wantServedFast(t, p, 2)
}

// wantServedFast ends p with a goroutine dump (SIGQUIT, the process
// started with GOTRACEBACK=all) and fails unless at least conns
// connections are held by the fast path and none by net/http's server.
func wantServedFast(t *testing.T, p *Proc, conns int) {
	t.Helper()
	p.Signal(syscall.SIGQUIT)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("no exit after SIGQUIT")
	}
	dump := p.Log()
	fast := strings.Count(dump, "internal/workerserver.(*conn).serve(")
	stock := strings.Count(dump, "net/http.(*conn).serve(")
	if fast < conns || stock != 0 {
		t.Fatalf("goroutines serving a connection: %d on the fast path, %d on net/http's server; want %d or more and 0\n%s",
			fast, stock, conns, tail([]byte(dump), 3000))
	}
}

// A chunked write on the fast path to a plain HTTP route: a Fencing-Token
// in its (undeclared) trailer is not forwarded upstream (no undeclared
// trailer is: the proxy forwards the trailers the head announced, as with
// net/http's server), and the write is fenced by the header's token.
func TestFastPathTrailerTokenNotForwarded(t *testing.T) {
	got := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- fmt.Sprintf("%s|%s|%s", b, r.Trailer.Get("Fencing-Token"), r.Trailer.Get("X-Other"))
	}))
	defer up.Close()
	p := startFencegate(t, fastPathYAML(gatewayYAML(up.URL)), "GOTRACEBACK=all")
	c, err := net.Dial("tcp", strings.TrimPrefix(p.URL("gateway"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, "PUT /orders/7 HTTP/1.1\r\nHost: gw\r\nFencing-Token: 5\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"4\r\nbody\r\n0\r\nFencing-Token: 99\r\nX-Other: kept\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		t.Fatalf("PUT: %d %s", res.StatusCode, b)
	}
	select {
	case g := <-got:
		if g != "body||" {
			t.Fatalf("upstream got body|token trailer|other trailer %q; want %q", g, "body||")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the write did not reach the upstream")
	}
	// The fence took the header's token: an older one is refused now.
	io.WriteString(c, "PUT /orders/7 HTTP/1.1\r\nHost: gw\r\nFencing-Token: 4\r\nContent-Length: 1\r\n\r\nx")
	res, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(res.Body)
	if res.StatusCode != http.StatusConflict {
		t.Fatalf("PUT with token 4 after 5: %d; want 409", res.StatusCode)
	}
	wantServedFast(t, p, 1)
}
