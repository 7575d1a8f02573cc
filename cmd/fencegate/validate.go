package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/fencegate/fencegate/adapters/listentls"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/certpool"
	"github.com/fencegate/fencegate/server"
	"github.com/spf13/cobra"
)

// validateCmd checks a configuration file as serve would, without
// opening the store or listening.
type validateCmd struct {
	printer
	config string
}

func newValidateCmd() *cobra.Command {
	c := &validateCmd{}
	cmd := &cobra.Command{
		Use:   "validate [-c FILE]",
		Short: "check a configuration file and exit",
		Long: `Validate checks a configuration file as serve would (routes, upstream TLS
files, listener certificates) without opening the store or listening.
Every problem is reported with the file, line and field. Exit status: 0
valid, 1 invalid, 2 usage.`,
		Example: `  fencegate validate -c configs/quickstart.yaml`,
		Args:    noArgs,
	}
	configFlag(cmd.Flags(), &c.config)
	return wrap(cmd, c)
}

func (c *validateCmd) Run(ctx context.Context, args []string) error {
	path := c.config
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Compile the routes too: it catches what only the upstream adapters
	// can check (upstream TLS files), without opening the store or
	// listening.
	if _, err := server.BuildRoutes(cfg, discard); err != nil {
		return cfg.Redact(fmt.Errorf("%s: %w", path, err))
	}
	// Load the listeners' certificate and client CA files as serve would
	// (ACME certificates are obtained only when serving).
	if cfg.TLS.Mode == "files" {
		tlsOptions := server.TLSOptions(cfg.TLS)
		tlsOptions.Logger = discard
		m, err := listentls.New(tlsOptions)
		if err != nil {
			return cfg.Redact(fmt.Errorf("%s: tls: %w", path, err))
		}
		m.Close()
	} else if cfg.TLS.ClientCAFile != "" {
		if _, err := certpool.Load(cfg.TLS.ClientCAFile); err != nil {
			return cfg.Redact(fmt.Errorf("%s: tls.client_ca_file: %w", path, err))
		}
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(c.stderr(), "warning: %v\n", w)
	}
	n := 0
	if cfg.Gateway != nil {
		n = len(cfg.Gateway.Routes)
	}
	fmt.Fprintf(c.stdout(), "%s: ok (%d routes)\n", path, n)
	return nil
}
