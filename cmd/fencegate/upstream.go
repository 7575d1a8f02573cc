package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/fencegate/fencegate/internal/recorder"
)

// upstreamCmd serves the sample upstream the demo and the Quickstart write
// through the gateway to: it applies PUT, POST, PATCH and DELETE to an
// in-memory map, answers GET with the value, and GET /_history with every
// write it applied, in order, with the Fencing-Token each carried. It is
// what the Quickstart curls, not a store to keep data in.
type upstreamCmd struct{}

func (c *upstreamCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("upstream", "[-listen ADDR]\n\nA sample upstream for trying the gateway: applies writes in memory, GET /_history lists them.\n\n  fencegate upstream -listen 127.0.0.1:9000 &")
	listen := fs.String("listen", "127.0.0.1:9000", "listen `address`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: &recorder.Recorder{}, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "fencegate upstream: sample upstream on http://%s (GET /_history lists the writes it applied)\n", ln.Addr())
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
