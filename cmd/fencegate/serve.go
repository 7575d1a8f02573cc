package main

import (
	"context"
	"errors"
	"log/slog"
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
	logWarnings(log, cfg)
	srv, err := server.New(ctx, cfg, server.Options{Logger: log, AcceptEmptyStore: *acceptEmpty, ConfigFile: *path})
	if err != nil {
		return cfg.Redact(err)
	}
	if err := srv.Start(ctx); err != nil {
		srv.Close()
		return cfg.Redact(err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			next, err := config.Load(*path)
			if err == nil {
				logWarnings(log, next)
				err = next.Redact(srv.Reload(next))
			} else {
				srv.ReloadFailed(err)
			}
			var kc *config.KeyChangeError
			switch {
			case errors.As(err, &kc):
				changes := make([]string, len(kc.Changes))
				for i, k := range kc.Changes {
					changes[i] = k.String()
				}
				log.Warn("reload refused: the new configuration changes how resource keys are built; still serving the previous configuration (change the route's key_version to confirm)",
					"file", *path, "changes", changes)
				continue
			case err != nil:
				log.Error("reload failed; still serving the previous configuration", "file", *path, "err", err.Error())
				continue
			}
			cfg = next
			log.Info("configuration reloaded", "file", *path)
		case <-ctx.Done():
			log.Info("shutting down: draining in-flight requests")
			return cfg.Redact(srv.Shutdown(context.Background()))
		}
	}
}

// logWarnings logs the legal but surprising settings of cfg.
func logWarnings(log *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings() {
		log.Warn("configuration warning", "file", w.File, "line", w.Line, "field", w.Field, "warning", w.Msg)
	}
}
