package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/config"
	"github.com/spf13/cobra"
)

// fenceRecoverCmd serves a PostgreSQL store again after it went back
// (postgres.Store.Recover).
type fenceRecoverCmd struct {
	printer
	config string
	gap    int64
	force  bool
	by     string
}

func newFenceRecoverCmd() *cobra.Command {
	c := &fenceRecoverCmd{}
	cmd := &cobra.Command{
		Use:   "recover [-c FILE] [--gap N] [--force]",
		Short: "serve a PostgreSQL store that went back (a failover to an asynchronous standby) again, making every older token worthless",
		Long: `Recover is the way back to serving after the gateways found the fence
store went back (fence_store_regressed: an asynchronous standby promoted,
an older backup restored). In one transaction, with token issuance held
off, it raises the coordinator's token sequence by --gap (far above any
token the lost primary could have issued), refuses every token issued
before it on every replica (workers re-acquire: every lease is ended),
except on routes with a token_source (etcd, ZooKeeper: their tokens come
from another counter; their fences are left as they are and their new
tokens are verified with that service, as always),
and leaves an audit record (table fencegate_recovery, and a log line).
Gateways serve again within a second, without a restart.

It is idempotent: on a store that is not found gone back it does nothing
unless --force (a loss the guard cannot see, e.g. a restored backup that
kept its timeline). See docs/recovery.md.`,
		Example: `  fencegate fence recover -c fencegate.yaml`,
		Args:    noArgs,
	}
	configFlag(cmd.Flags(), &c.config)
	cmd.Flags().Int64Var(&c.gap, "gap", postgres.DefaultRecoveryGap, "how far to raise the token sequence above its value on the store")
	cmd.Flags().BoolVar(&c.force, "force", false, "recover even if the store is not found gone back")
	cmd.Flags().StringVar(&c.by, "by", "", "who runs the recovery, for the audit record (default hostname/pid)")
	return wrap(cmd, c)
}

func (c *fenceRecoverCmd) Run(ctx context.Context, args []string) error {
	if c.gap <= 0 {
		return usagef("--gap must be positive")
	}
	cfg, err := config.Load(c.config)
	if err != nil {
		return err
	}
	p := cfg.Store.Postgres
	if p == nil {
		return usagef("fence recover is for store.postgres (the embedded store has no standby to fail over to; see docs/recovery.md)")
	}
	log := slog.New(slog.NewTextHandler(c.stderr(), nil))
	st, err := postgres.Open(ctx, p.URL, postgres.Options{MaxConns: 2, Timeout: p.Timeout, Logger: log})
	if err != nil {
		return err
	}
	defer st.Close()
	// Fences of routes whose tokens come from etcd or ZooKeeper are not
	// raised to the floor of the coordinator's sequence.
	res, err := st.Recover(ctx, postgres.RecoverOptions{Gap: c.gap, Force: c.force, By: c.by, Foreign: cfg.TokenSourceKey})
	if err != nil {
		return err
	}
	if !res.Recovered {
		fmt.Fprintf(c.stderr(), "nothing to recover: the store is served on timeline %d (token floor %d)\n", res.Timeline, res.TokenFloor)
	}
	b, _ := json.Marshal(res)
	fmt.Fprintf(c.stdout(), "%s\n", b)
	return nil
}
