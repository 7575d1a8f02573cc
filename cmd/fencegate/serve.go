package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/server"
	"github.com/spf13/cobra"
)

// serveCmd runs what the configuration file sets up until SIGINT or
// SIGTERM; SIGHUP reloads the file.
type serveCmd struct {
	config      string
	acceptEmpty bool
}

func newServeCmd() *cobra.Command {
	c := &serveCmd{}
	cmd := &cobra.Command{
		Use:   "serve [-c FILE] [--accept-empty-store]",
		Short: "run the gateway, coordinator and admin listeners FILE configures",
		Long: `Serve runs the gateway, the lease coordinator and the admin listener the
configuration file sets up, until SIGINT or SIGTERM (in-flight requests are
drained). SIGHUP reloads the file; a file that does not validate leaves the
previous configuration serving.`,
		Example: `  fencegate serve -c configs/quickstart.yaml
  kill -HUP $(pidof fencegate)     # reload the configuration`,
		Args: noArgs,
	}
	configFlag(cmd.Flags(), &c.config)
	cmd.Flags().BoolVar(&c.acceptEmpty, "accept-empty-store", false, "start on a store that is not the one the gateway served from (its fences are lost; see docs/recovery.md)")
	return wrap(cmd, c)
}

func (c *serveCmd) Run(ctx context.Context, args []string) error {
	cfg, err := config.Load(c.config)
	if errors.Is(err, fs.ErrNotExist) {
		return usagef("%v: give the configuration file with -c FILE (e.g. fencegate serve -c configs/quickstart.yaml)", err)
	}
	if err != nil {
		return err
	}
	log := server.NewLogger(os.Stderr, cfg.Log)
	logWarnings(log, cfg)
	srv, err := server.New(ctx, cfg, server.Options{Logger: log, AcceptEmptyStore: c.acceptEmpty, ConfigFile: c.config,
		Build: currentVersion().BuildInfo})
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
			next, err := config.Load(c.config)
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
					"file", c.config, "changes", changes)
				continue
			case err != nil:
				log.Error("reload failed; still serving the previous configuration", "file", c.config, "err", err.Error())
				continue
			}
			cfg = next
			log.Info("configuration reloaded", "file", c.config)
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
