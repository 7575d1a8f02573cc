package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/server"
)

type serveCmd struct{}

func (c *serveCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("serve", "-c FILE [--accept-empty-store]")
	path := configFlag(fs)
	acceptEmpty := fs.Bool("accept-empty-store", false, "start on a store that is not the one the gateway served from (its fences are lost; see docs/recovery.md)")
	cfg, err := parseConfig(fs, path, args)
	if err != nil {
		return err
	}
	log := server.NewLogger(os.Stderr, cfg.Log)
	srv, err := server.New(ctx, cfg, server.Options{Logger: log, AcceptEmptyStore: *acceptEmpty})
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		srv.Close()
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			next, err := config.Load(*path)
			if err == nil {
				err = srv.Reload(next)
			}
			if err != nil {
				log.Error("reload failed; still serving the previous configuration", "file", *path, "err", err.Error())
				continue
			}
			log.Info("configuration reloaded", "file", *path)
		case <-ctx.Done():
			log.Info("shutting down: draining in-flight requests")
			return srv.Shutdown(context.Background())
		}
	}
}
