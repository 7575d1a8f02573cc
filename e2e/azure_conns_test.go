package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"

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

// An attacker's attempt on the kept connections: a worker's Put Blob that
// the store refuses (the worker's own If-Match names a version that is not
// there) carries a body that is itself a request deleting another blob.
// Were the body taken for a request on the kept connection, the victim
// would be gone, or the next write's answer would be the smuggled one. The
// victim keeps its content, and the next write gets its own answer.
func TestAzureKeptConnectionBodyIsNoRequest(t *testing.T) {
	e := startAzEnv(t, "")
	w := azWorker(t, e.GW, func() int64 { return 1 })
	if err := azPut(w, "victim", "keep me"); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(e.Az.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	smuggled := "DELETE " + u.Path + "/" + azContainer + "/victim HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n"
	wrong := azcore.ETag(`"0x8D0000000000099"`)
	_, err = w.UploadBuffer(context.Background(), azContainer, "victim", []byte(smuggled), &azblob.UploadBufferOptions{
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &wrong}},
	})
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("Put Blob on a wrong If-Match: %v; want 412 from the store", err)
	}
	for i := range 5 {
		if err := azPut(w, "after", fmt.Sprintf("after %d", i)); err != nil {
			t.Fatalf("write %d after the refused one: %v", i, err)
		}
	}
	if body, _ := e.stored(t, "victim"); body != "keep me" {
		t.Fatalf("victim holds %q; want %q", body, "keep me")
	}
	if body, _ := e.stored(t, "after"); body != "after 4" {
		t.Fatalf("after holds %q; want %q", body, "after 4")
	}
}
