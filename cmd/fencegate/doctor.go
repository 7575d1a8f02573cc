package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/server"

	"github.com/spf13/cobra"
)

// doctorCmd checks that upstreams behave as the configuration needs: for S3
// routes, that the store honours conditional writes (If-Match,
// If-None-Match), which `precondition: etag` relies on.
type doctorCmd struct {
	config, bucket, container, path string
}

type doctorFailed struct{ n int }

func (e *doctorFailed) Error() string { return fmt.Sprintf("%d check(s) failed", e.n) }
func (e *doctorFailed) ExitCode() int { return 1 }

func newDoctorCmd() *cobra.Command {
	c := &doctorCmd{}
	cmd := &cobra.Command{
		Use:   "doctor [-c FILE] [--bucket NAME] [--container NAME] [--path PREFIX]",
		Short: "check that upstreams behave as the configuration needs",
		Long: `Doctor checks that the upstreams behave as the configuration needs: that
S3 stores and HTTP upstreams with precondition: etag honour If-Match and
If-None-Match, GCS stores ifGenerationMatch, and Azure Blob stores If-Match
and If-None-Match, racing writes included,
that HTTP upstreams read a write's body before its next request (or close
the connection), also where servers answer from the head alone (a
precondition, no credentials, an unknown path, a redirect, an Expect), that
upstream.h2c upstreams speak HTTP/2 over cleartext, that a route in front of
a WebDAV server (OPTIONS answered with a DAV header) fences collections and
Destinations, that a shared PostgreSQL store keeps a server session
per connection (no pooler in transaction mode), and that each etcd
cluster of a token_source has a quorum, a leader, a supported version,
authentication, TLS and no alarm. It writes probe objects
under --bucket / --container / --path. Exit status: 0 every check
passed, 1 a check failed, 2 usage (nothing to check).`,
		Example: `  fencegate doctor -c fencegate.yaml --bucket probe-bucket
  fencegate doctor -c fencegate.yaml --path /probe/`,
		Args: noArgs,
	}
	configFlag(cmd.Flags(), &c.config)
	cmd.Flags().StringVar(&c.bucket, "bucket", "", "bucket for the probe object (default: each route's s3.check_bucket or gcs.check_bucket)")
	cmd.Flags().StringVar(&c.container, "container", "", "container for the probe blob of Azure routes (default: each route's azure.check_container)")
	cmd.Flags().StringVar(&c.path, "path", "", "path prefix for the probe objects of HTTP routes (default: each route's upstream.check_path)")
	return wrap(cmd, c)
}

func (c *doctorCmd) Run(ctx context.Context, args []string) error {
	cfg, err := config.Load(c.config)
	if err != nil {
		return err
	}
	routes, err := server.BuildRoutes(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
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
	if ok, err := checkStoreReplication(ctx, cfg); ok {
		checked++
		if err != nil {
			failed++
		}
	}
	for _, e := range etcdTargets(cfg) {
		checked++
		if _, err := checkEtcd(ctx, os.Stdout, e.label, e.opts); err != nil {
			failed++
		}
	}
	oc, of := doctorObjectStores(ctx, cfg, c.bucket, c.container)
	checked, failed = checked+oc, failed+of
	hc, hf := doctorHTTPRoutes(ctx, cfg, c.path)
	checked, failed = checked+hc, failed+hf
	uc, uf := doctorUnreadBodies(ctx, cfg, c.path)
	checked, failed = checked+uc, failed+uf
	dc, df := doctorDAVRoutes(ctx, cfg, routes, c.path)
	checked, failed = checked+dc, failed+df
	if checked == 0 {
		return usagef("no route to check: pass --bucket or set s3.check_bucket (S3) or gcs.check_bucket (GCS), --container or set azure.check_container (Azure), --path or set upstream.check_path (HTTP routes)")
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

// checkStoreReplication reports whether the PostgreSQL store's primary has
// a synchronous standby and what that means for the fence (a failover to
// an asynchronous standby may lose advances and issued tokens: the gateways
// then refuse to serve until `fencegate fence recover`), and fails if the
// store is found gone back now. ok is false when there is nothing to check.
func checkStoreReplication(ctx context.Context, cfg *config.Config) (ok bool, err error) {
	p := cfg.Store.Postgres
	if p == nil {
		return false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := postgres.Open(cctx, p.URL, postgres.Options{MaxConns: 1, Timeout: p.Timeout, SkipMigrate: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		err = st.CheckStore(cctx)
		defer st.Close()
	}
	if err != nil {
		fmt.Printf("store.postgres replication: FAIL: %v\n", err)
		return true, err
	}
	g := st.Guard()
	if c := g.Regressed(); c != "" {
		fmt.Printf("store.postgres replication: FAIL: the store went back (%s): gateways refuse fenced writes and token issuance until `fencegate fence recover` (docs/recovery.md)\n", c)
		return true, fmt.Errorf("store went back")
	}
	r := g.Replication()
	sync := "no synchronous standby"
	if r.Synchronous() {
		sync = fmt.Sprintf("synchronous_standby_names = '%s'", r.SynchronousStandbyNames)
	}
	seen := fmt.Sprintf("%d standby(s), %d streaming as sync", r.Standbys, r.SyncStandbys)
	if r.SyncStandbys < 0 {
		seen = fmt.Sprintf("%d standby(s); sync_state not visible to this role (grant pg_monitor)", r.Standbys)
	}
	word := "ok"
	if !r.Synchronous() || r.SyncStandbys == 0 {
		word = "warn"
	}
	fmt.Printf("store.postgres replication: %s: timeline %d, %s, %s: %s (docs/shared-fence.md)\n", word, r.Timeline, sync, seen, r.Meaning())
	return true, nil
}

// doctorObjectStores runs each object-store route's probes (its
// dialect's, server.ObjectStore) where the flag or its section says.
func doctorObjectStores(ctx context.Context, cfg *config.Config, bucket, container string) (checked, failed int) {
	flags := map[string]string{"--bucket": bucket, "--container": container}
	for _, rc := range cfg.Gateway.Routes {
		dia, ok := server.ObjectStoreOf(rc)
		if !ok {
			continue
		}
		where, skipped := dia.CheckWhere(rc, flags[dia.Where])
		if where == "" {
			fmt.Printf("route %s: %s\n", rc.Name, skipped)
			continue
		}
		checked++
		bad := false
		for _, f := range dia.Doctor(ctx, rc, where) {
			fmt.Printf("route %s: %s: %s\n", rc.Name, f.Word, f.Text)
			bad = bad || f.Failed()
		}
		if bad {
			failed++
		}
	}
	return checked, failed
}
