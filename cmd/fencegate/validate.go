package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

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
	// Compile the routes too: it catches what only the upstream adapters
	// can check, without opening the store or listening.
	if _, err := server.BuildRoutes(cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return fmt.Errorf("%s: %w", *path, err)
	}
	n := 0
	if cfg.Gateway != nil {
		n = len(cfg.Gateway.Routes)
	}
	fmt.Printf("%s: ok (%d routes)\n", *path, n)
	return nil
}
