package main

import (
	"context"
	"fmt"
	"os"

	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/config"
)

// migrateCmd applies the PostgreSQL schema migrations (fence, leases, ...)
// without starting anything: for deployments whose serving role may not
// change the schema. `fencegate serve` applies them at start as well.
type migrateCmd struct{}

func (c *migrateCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("migrate", "[-c FILE | -url URL]")
	path := fs.String("c", "", "configuration `file` whose store.postgres.url is used")
	url := fs.String("url", os.Getenv("DATABASE_URL"), "PostgreSQL `URL` (env DATABASE_URL), instead of -c")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("migrate takes no arguments")
	}
	if *path != "" {
		cfg, err := config.Load(*path)
		if err != nil {
			return err
		}
		if cfg.Store.Postgres == nil {
			fmt.Println("the embedded store needs no migrations: it is set up when it is opened")
			return nil
		}
		*url = cfg.Store.Postgres.URL
	}
	if *url == "" {
		return usagef("give -c FILE or -url URL (or set DATABASE_URL)")
	}
	st, err := postgres.Open(ctx, *url, postgres.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Println("schema is up to date")
	return nil
}
