package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/server"

	"github.com/fencegate/fencegate"
	"github.com/spf13/cobra"
)

// demoCmd plays the stale-owner story of docs/design.md §1 against a real
// gateway and a real lease coordinator in one process on the embedded store,
// in front of a sample upstream, and fails if the upstream ends up with the
// zombie's write.
type demoCmd struct {
	printer
	dir string
}

func newDemoCmd() *cobra.Command {
	c := &demoCmd{}
	cmd := &cobra.Command{
		Use:   "demo [--dir DIR]",
		Short: "run the stale-owner story on the embedded store",
		Long: `Demo plays the stale-owner story in one process: a real gateway and lease
coordinator on the embedded store in front of a sample upstream. Worker A
takes a lease and pauses past it, worker B takes the lease and writes, A
wakes up and writes with its old token and is refused. Exit status 1 if
the upstream ends up with A's write.`,
		Example: `  fencegate demo
  fencegate demo --dir /tmp/fg     # keep the store to look at afterwards`,
		Args: noArgs,
	}
	cmd.Flags().StringVar(&c.dir, "dir", "", "store `directory` (default: a temporary one, removed afterwards)")
	cmd.MarkFlagDirname("dir")
	return wrap(cmd, c)
}

func (c *demoCmd) Run(ctx context.Context, args []string) error {
	if c.dir == "" {
		tmp, err := os.MkdirTemp("", "fencegate-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		c.dir = tmp
	}

	// The sample upstream: applies writes, remembers the order.
	rec := &recorder.Recorder{}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	up := &http.Server{Handler: rec, ReadHeaderTimeout: 5 * time.Second}
	go up.Serve(upLn)
	defer up.Close()

	yaml := fmt.Sprintf(`
gateway:
  listen: 127.0.0.1:0
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: "http://%s", timeout: 5s}
      resource: "{path}"
store:
  embedded: {path: %q}
coordinator: {enabled: true, listen: 127.0.0.1:0}
admin: {listen: ""}
log: {level: error}
`, upLn.Addr(), filepath.Join(c.dir, "fencegate.db"))
	cfg, err := config.Parse("demo.yaml", []byte(yaml))
	if err != nil {
		return err
	}
	srv, err := server.New(ctx, cfg, server.Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.Start(ctx); err != nil {
		return err
	}
	gw := "http://" + srv.Addr("gateway")
	coord := "http://" + srv.Addr("coordinator")
	const res = "/orders/7"
	const ttl = 500 * time.Millisecond

	say := func(format string, args ...any) { fmt.Fprintf(c.stdout(), format+"\n", args...) }
	say("fencegate demo: gateway %s, coordinator %s (embedded store in %s), sample upstream http://%s", gw, coord, c.dir, upLn.Addr())
	say("")
	// A takes the lease with one call and, being paused, never renews it.
	workerA := &client.Client{URL: coord, Owner: "worker-A"}
	la, err := workerA.AcquireOnce(ctx, res, client.Options{TTL: ttl})
	if err != nil {
		return fmt.Errorf("worker A: %w", err)
	}
	tokA := la.Token
	say("1. worker A acquires the lease on %s for %v: token %d", res, ttl, tokA)
	say("2. worker A pauses (a long GC, a partition); its lease expires")
	time.Sleep(ttl + 200*time.Millisecond)
	workerB := &client.Client{URL: coord, Owner: "worker-B"}
	lb, err := workerB.Acquire(ctx, res, client.Options{TTL: 30 * time.Second})
	if err != nil {
		return fmt.Errorf("worker B: %w", err)
	}
	defer lb.Close()
	tokB := lb.Token
	say("3. worker B acquires the lease on %s: token %d (renewed in the background)", res, tokB)
	st, body, err := putWith(&http.Client{Transport: lb.RoundTripper(nil)}, gw+res, 0, "shipped by B")
	if err != nil {
		return err
	}
	say("4. worker B writes %q with token %d -> %d %s", "shipped by B", tokB, st, body)
	st, body, err = put(gw+res, tokA, "cancelled by A")
	if err != nil {
		return err
	}
	say("5. worker A wakes up and writes %q with token %d -> %d %s", "cancelled by A", tokA, st, body)

	var refusal struct{ Error string }
	json.Unmarshal([]byte(body), &refusal)
	v, _ := rec.Get(res)
	say("")
	say("upstream state of %s: %q; applied writes: %s", res, v, recorder.Summary(rec.HistoryOf(res)))
	if st != http.StatusConflict || refusal.Error != "stale_fencing_token" || v != "shipped by B" {
		return errors.New("FAILED: the zombie's write was not fenced")
	}
	say("A's late write was refused with stale_fencing_token and never reached the upstream.")
	return nil
}

func put(url string, token int64, value string) (int, string, error) {
	return putWith(http.DefaultClient, url, token, value)
}

// putWith sends a PUT through hc; a token of 0 leaves the header to hc's
// transport (a lease's RoundTripper).
func putWith(hc *http.Client, url string, token int64, value string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(value))
	if err != nil {
		return 0, "", err
	}
	if token != 0 {
		req.Header.Set(fencegate.DefaultTokenHeader, strconv.FormatInt(token, 10))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}
