package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/adapters/s3"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/precondition"
	"github.com/fencegate/fencegate/server"

	"github.com/spf13/cobra"
)

// doctorCmd checks that upstreams behave as the configuration needs: for S3
// routes, that the store honours conditional writes (If-Match,
// If-None-Match), which `precondition: etag` relies on.
type doctorCmd struct {
	config, bucket, path string
}

type doctorFailed struct{ n int }

func (e *doctorFailed) Error() string { return fmt.Sprintf("%d check(s) failed", e.n) }
func (e *doctorFailed) ExitCode() int { return 1 }

func newDoctorCmd() *cobra.Command {
	c := &doctorCmd{}
	cmd := &cobra.Command{
		Use:   "doctor [-c FILE] [--bucket NAME] [--path PREFIX]",
		Short: "check that upstreams behave as the configuration needs",
		Long: `Doctor checks that the upstreams behave as the configuration needs: that
S3 stores and HTTP upstreams with precondition: etag honour If-Match and
If-None-Match, racing writes included, that HTTP upstreams read a write's
body before its next request (or close the connection), and that a shared
PostgreSQL store keeps a server session per connection (no pooler in
transaction mode). It writes probe objects under --bucket / --path. Exit status: 0 every check
passed, 1 a check failed, 2 usage (nothing to check).`,
		Example: `  fencegate doctor -c fencegate.yaml --bucket probe-bucket
  fencegate doctor -c fencegate.yaml --path /probe/`,
		Args: noArgs,
	}
	configFlag(cmd.Flags(), &c.config)
	cmd.Flags().StringVar(&c.bucket, "bucket", "", "bucket for the probe object (default: each route's s3.check_bucket)")
	cmd.Flags().StringVar(&c.path, "path", "", "path prefix for the probe objects of HTTP routes (default: each route's upstream.check_path)")
	return wrap(cmd, c)
}

func (c *doctorCmd) Run(ctx context.Context, args []string) error {
	cfg, err := config.Load(c.config)
	if err != nil {
		return err
	}
	if _, err := server.BuildRoutes(cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return fmt.Errorf("%s: %w", c.config, err)
	}
	if cfg.Gateway == nil {
		// A coordinator-only configuration has no upstream to check.
		return usagef("%s configures no gateway: doctor checks the S3 routes of a gateway", c.config)
	}
	failed, checked := 0, 0
	if ok, err := checkSharedStore(ctx, cfg); ok {
		checked++
		if err != nil {
			failed++
		}
	}
	for _, rc := range cfg.Gateway.Routes {
		if rc.S3 == nil {
			continue
		}
		b := c.bucket
		if b == "" {
			b = rc.S3.CheckBucket
		}
		if b == "" {
			fmt.Printf("route %s: skipped (no --bucket and no s3.check_bucket)\n", rc.Name)
			continue
		}
		checked++
		cctx, cancel := context.WithTimeout(ctx, precondition.ProbeTimeout)
		opts := server.S3Options(rc, cfg.Gateway.TokenHeader)
		opts.ETags = nopETags{}
		up, err := s3.New(cctx, opts)
		if err == nil {
			err = up.CheckConditionalWrites(cctx, b)
		}
		if err == nil {
			err = up.ProbeRace(cctx, b, 0)
		}
		var conds s3.Conditions
		if err == nil {
			conds, err = up.ProbeConditions(cctx, b, 0)
		}
		cancel()
		if err != nil {
			failed++
			fmt.Printf("route %s: FAIL: %v\n", rc.Name, err)
			continue
		}
		fmt.Printf("route %s: ok: %s honours If-Match and If-None-Match on PutObject, racing writes included (bucket %s)\n", rc.Name, config.RedactURL(rc.S3.Endpoint), b)
		conds.Each(func(op string, f s3.Finding) {
			if f.Honoured {
				fmt.Printf("route %s: ok: %s honoured: the gateway makes it conditional\n", rc.Name, op)
			} else {
				fmt.Printf("route %s: note: %s not honoured (%s): the gateway forwards it unconditioned; it is fenced, but a delayed one can still land\n", rc.Name, op, f.Detail)
			}
		})
	}
	hc, hf := doctorHTTPRoutes(ctx, cfg, c.path)
	checked, failed = checked+hc, failed+hf
	uc, uf := doctorUnreadBodies(ctx, cfg, c.path)
	checked, failed = checked+uc, failed+uf
	if checked == 0 {
		return usagef("no route to check: pass --bucket or set s3.check_bucket (S3), --path or set upstream.check_path (HTTP routes)")
	}
	if failed > 0 {
		return &doctorFailed{failed}
	}
	return nil
}

// checkSharedStore checks, in fence mode shared, that the database is
// reached with a server session of its own per connection: the in-flight
// markers are session-level advisory locks, which a pooler in transaction
// or statement mode (PgBouncer) would hand to other clients. ok is false
// when there is nothing to check.
func checkSharedStore(ctx context.Context, cfg *config.Config) (ok bool, err error) {
	if cfg.Fence.Mode != "shared" || cfg.Store.Postgres == nil {
		return false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := postgres.CheckSessionPooling(cctx, cfg.Store.Postgres.URL); err != nil {
		fmt.Printf("store.postgres: FAIL: %v\n", err)
		return true, err
	}
	fmt.Println("store.postgres: ok: each connection keeps a server session of its own (no pooler, or PgBouncer pool_mode = session)")
	return true, nil
}

// nopETags satisfies s3.New for routes with precondition etag; doctor
// sends no fenced writes.
type nopETags struct{}

func (nopETags) LastETag(context.Context, string) (string, error)        { return "", nil }
func (nopETags) RecordETag(context.Context, string, int64, string) error { return nil }
