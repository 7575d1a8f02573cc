package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/server"
)

// env is a fencegate process (gateway and coordinator on the embedded
// store) in front of a recording upstream, for the examples and tests.
type env struct {
	Gateway, Coordinator string
	Rec                  *recorder.Recorder
	close                func()
}

func startEnv() (*env, error) {
	dir, err := os.MkdirTemp("", "fencegate-client-")
	if err != nil {
		return nil, err
	}
	rec := &recorder.Recorder{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	up := &http.Server{Handler: rec}
	go up.Serve(ln)
	cfg, err := config.Parse("example.yaml", []byte(fmt.Sprintf(`
gateway:
  listen: 127.0.0.1:0
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: "http://%s", timeout: 5s}
      resource: "{path}"
store: {embedded: {path: %q}}
coordinator: {enabled: true, listen: 127.0.0.1:0}
admin: {listen: ""}
`, ln.Addr(), filepath.Join(dir, "fencegate.db"))))
	if err != nil {
		return nil, err
	}
	srv, err := server.New(context.Background(), cfg, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(context.Background()); err != nil {
		return nil, err
	}
	return &env{
		Gateway: "http://" + srv.Addr("gateway"), Coordinator: "http://" + srv.Addr("coordinator"), Rec: rec,
		close: func() { srv.Close(); up.Close(); os.RemoveAll(dir) },
	}, nil
}

// A worker acquires a lease, writes through the gateway with the lease's
// token, and releases the lease when done.
func ExampleClient_Acquire() {
	e, err := startEnv()
	if err != nil {
		log.Fatal(err)
	}
	defer e.close()
	ctx := context.Background()

	c := &client.Client{URL: e.Coordinator, Owner: "worker-1"}
	lease, err := c.Acquire(ctx, "/orders/7", client.Options{TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("token:", lease.Token)

	hc := &http.Client{Transport: lease.RoundTripper(nil)}
	req, _ := http.NewRequestWithContext(lease.Context(), http.MethodPut, e.Gateway+"/orders/7", strings.NewReader("shipped"))
	resp, err := hc.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("write:", resp.Status)

	lease.Close()
	fmt.Println("after Close:", lease.Err())
	// Output:
	// token: 1
	// write: 200 OK
	// after Close: lease closed
}

// A worker whose lease passed to a newer owner is refused by the gateway:
// the write has no effect, RoundTripper returns a *StaleError and the
// lease's context is cancelled.
func ExampleStaleError() {
	e, err := startEnv()
	if err != nil {
		log.Fatal(err)
	}
	defer e.close()
	ctx := context.Background()
	put := func(l *client.Lease, body string) error {
		req, _ := http.NewRequest(http.MethodPut, e.Gateway+"/orders/7", strings.NewReader(body))
		resp, err := (&http.Client{Transport: l.RoundTripper(nil)}).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	a := &client.Client{URL: e.Coordinator, Owner: "worker-A"}
	leaseA, err := a.Acquire(ctx, "/orders/7", client.Options{TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer leaseA.Close()
	// A's lease ends before A notices (in life: A paused past its TTL;
	// here it is released behind A's back), and B takes over.
	a.Release(ctx, "/orders/7", leaseA.Token)
	b := &client.Client{URL: e.Coordinator, Owner: "worker-B"}
	leaseB, err := b.Acquire(ctx, "/orders/7", client.Options{TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer leaseB.Close()
	if err := put(leaseB, "by B"); err != nil {
		log.Fatal(err)
	}

	err = put(leaseA, "by A")
	var stale *client.StaleError
	if errors.As(err, &stale) {
		fmt.Printf("refused: token %d, highest %d\n", stale.Token, stale.Highest)
	}
	<-leaseA.Done()
	fmt.Println("A's lease ended by the refusal:", context.Cause(leaseA.Context()) == error(stale))
	v, _ := e.Rec.Get("/orders/7")
	fmt.Println("upstream:", v)
	// Output:
	// refused: token 1, highest 2
	// A's lease ended by the refusal: true
	// upstream: by B
}
