package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	tlsconf "github.com/fencegate/fencegate/adapters/tls"
	"github.com/fencegate/fencegate/server"
)

type validateCmd struct{}

func (c *validateCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("validate", "-c FILE")
	path := configFlag(fs)
	cfg, err := parseConfig(fs, path, args)
	if err != nil {
		return err
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Compile the routes too: it catches what only the upstream adapters
	// can check (upstream TLS files), without opening the store or
	// listening.
	if _, err := server.BuildRoutes(cfg, discard); err != nil {
		return cfg.Redact(fmt.Errorf("%s: %w", *path, err))
	}
	// Load the listeners' certificate and client CA files as serve would
	// (ACME certificates are obtained only when serving).
	if cfg.TLS.Mode == "files" {
		tlsOptions := server.TLSOptions(cfg.TLS)
		tlsOptions.Logger = discard
		m, err := tlsconf.New(tlsOptions)
		if err != nil {
			return cfg.Redact(fmt.Errorf("%s: tls: %w", *path, err))
		}
		m.Close()
	} else if cfg.TLS.ClientCAFile != "" {
		if _, err := tlsconf.LoadPool(cfg.TLS.ClientCAFile); err != nil {
			return cfg.Redact(fmt.Errorf("%s: tls.client_ca_file: %w", *path, err))
		}
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(os.Stderr, "warning: %v\n", w)
	}
	n := 0
	if cfg.Gateway != nil {
		n = len(cfg.Gateway.Routes)
	}
	fmt.Printf("%s: ok (%d routes)\n", *path, n)
	return nil
}
