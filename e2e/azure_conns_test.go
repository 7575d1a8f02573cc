package e2e

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// Azure routes keep their connections to the store across writes (the
// store and Azurite frame every body, read or not; fencegate doctor checks
// it): twenty Put Blobs through the gateway reach Azurite on one or two
// connections, not twenty, and each blob holds its own write.
func TestAzureWritesKeepConnections(t *testing.T) {
	srv := testenv.Azurite(t)
	srv.CreateContainer(t, azContainer)
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", u.Host)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, up)
			}()
		}
	}()
	endpoint := "http://" + ln.Addr().String() + u.Path
	p := startFencegate(t, s3GatewayYAML(azRouteYAML("blobs", "", endpoint, "", "30s")))
	w := azWorker(t, p.URL("gateway"), func() int64 { return 1 })
	const writes = 20
	for i := range writes {
		if err := azPut(w, fmt.Sprintf("kept-%d", i), fmt.Sprintf("write %d", i)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if n := accepted.Load(); n > 2 {
		t.Errorf("%d writes reached Azurite on %d connections; want at most 2 (kept)", writes, n)
	}
	e := &azEnv{Az: srv}
	for i := range writes {
		if body, _ := e.stored(t, fmt.Sprintf("kept-%d", i)); body != fmt.Sprintf("write %d", i) {
			t.Errorf("kept-%d holds %q; want %q", i, body, fmt.Sprintf("write %d", i))
		}
	}
}
