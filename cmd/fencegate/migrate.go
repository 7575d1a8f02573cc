package main

import (
	"context"
	"fmt"
	"os"

	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/config"

	"github.com/spf13/cobra"
)

// migrateCmd applies the PostgreSQL schema migrations (fence, leases, ...)
// without starting anything: for deployments whose serving role may not
// change the schema. `fencegate serve` applies them at start as well.
type migrateCmd struct {
	printer
	config, url string
}

func newMigrateCmd() *cobra.Command {
	c := &migrateCmd{}
	cmd := &cobra.Command{
		Use:   "migrate [-c FILE | --url URL]",
		Short: "apply the PostgreSQL schema migrations",
		Long: `Migrate applies the PostgreSQL schema migrations (fences, leases, ...)
without starting anything, for deployments whose serving role may not
change the schema. serve applies them at start as well. The embedded store
needs none.`,
		Example: `  fencegate migrate -c fencegate.yaml
  DATABASE_URL=postgres://admin@db/fencegate fencegate migrate`,
		Args: noArgs,
	}
	cmd.Flags().StringVarP(&c.config, "config", "c", "", "configuration `file` whose store.postgres.url is used")
	cobra.MarkFlagFilename(cmd.Flags(), "config", "yaml", "yml")
	// The default is read when running: the help must not print a
	// password from the environment.
	cmd.Flags().StringVar(&c.url, "url", "", "PostgreSQL `URL` (default env DATABASE_URL), instead of -c")
	return wrap(cmd, c)
}

func (c *migrateCmd) Run(ctx context.Context, args []string) error {
	if c.config != "" {
		cfg, err := config.Load(c.config)
		if err != nil {
			return err
		}
		if cfg.Store.Postgres == nil {
			fmt.Fprintln(c.stdout(), "the embedded store needs no migrations: it is set up when it is opened")
			return nil
		}
		c.url = cfg.Store.Postgres.URL
	}
	if c.url == "" {
		c.url = os.Getenv("DATABASE_URL")
	}
	if c.url == "" {
		return usagef("give -c FILE or --url URL (or set DATABASE_URL)")
	}
	st, err := postgres.Open(ctx, c.url, postgres.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Fprintln(c.stdout(), "schema is up to date")
	return nil
}
