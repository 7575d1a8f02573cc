package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/fencegate/fencegate/internal/recorder"

	"github.com/spf13/cobra"
)

// upstreamCmd serves the sample upstream the demo and the Quickstart write
// through the gateway to: it applies PUT, POST, PATCH and DELETE to an
// in-memory map, answers GET with the value, and GET /_history with every
// write it applied, in order, with the Fencing-Token each carried. It is
// what the Quickstart curls, not a store to keep data in.
type upstreamCmd struct {
	printer
	listen string
}

func newUpstreamCmd() *cobra.Command {
	c := &upstreamCmd{}
	cmd := &cobra.Command{
		Use:   "upstream [--listen ADDR]",
		Short: "a sample upstream that records writes (for the Quickstart)",
		Long: `Upstream serves a sample upstream for trying the gateway: it applies PUT,
POST, PATCH and DELETE to an in-memory map, answers GET with the value, and
GET /_history with every write it applied, in order, with the Fencing-Token
each carried. It is not a store to keep data in.`,
		Example: `  fencegate upstream --listen 127.0.0.1:9000 &
  curl -s http://127.0.0.1:9000/_history`,
		Args: noArgs,
	}
	cmd.Flags().StringVar(&c.listen, "listen", "127.0.0.1:9000", "listen `address`")
	return wrap(cmd, c)
}

func (c *upstreamCmd) Run(ctx context.Context, args []string) error {
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: &recorder.Recorder{}, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(c.stderr(), "fencegate upstream: sample upstream on http://%s (GET /_history lists the writes it applied)\n", ln.Addr())
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
