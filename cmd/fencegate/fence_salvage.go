package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/config"
	"github.com/spf13/cobra"
)

// fenceSalvageCmd opens an embedded store whose advance log is damaged,
// keeping every valid record, so that the fences can be raised again.
type fenceSalvageCmd struct {
	printer
	config string
}

func newFenceSalvageCmd() *cobra.Command {
	c := &fenceSalvageCmd{}
	cmd := &cobra.Command{
		Use:   "salvage-log [-c FILE]",
		Short: "open an embedded store whose advance log is damaged",
		Long: `Salvage-log opens the embedded store when the gateway refuses to, because
its advance log is damaged ("advance log damaged"): it applies every valid
record it finds in the log segments, prints what was damaged, and leaves
the store without a log, so that the gateway starts again.

The advances in the damaged parts are lost: their fences may be lower than
tokens that were accepted. Before serving, raise them from the newest
export (fence import) or from the objects' stamps (fence rebuild). Stop
the gateway first. Running it again on a store without a log changes
nothing. See docs/recovery.md, "A damaged advance log".`,
		Example: `  fencegate fence salvage-log -c fencegate.yaml
  fencegate fence import -c fencegate.yaml fences.jsonl`,
		Args: noArgs,
	}
	configFlag(cmd.Flags(), &c.config)
	return wrap(cmd, c)
}

func (c *fenceSalvageCmd) Run(ctx context.Context, args []string) error {
	cfg, err := config.Load(c.config)
	if err != nil {
		return err
	}
	if cfg.Store.Embedded == nil {
		return usagef("salvage-log is for the embedded store; this configuration uses PostgreSQL")
	}
	var rep bolt.SalvageReport
	st, err := bolt.Open(cfg.Store.Embedded.Path, bolt.Options{SalvageLog: &rep})
	if errors.Is(err, bolt.ErrLocked) {
		return fmt.Errorf("%w; stop the gateway first (the embedded store is opened by one process at a time)", err)
	}
	if err != nil {
		return err
	}
	if err := st.Close(); err != nil {
		return err
	}
	w := c.stderr()
	fmt.Fprintf(w, "salvaged %d log record(s) into %s\n", rep.Records, cfg.Store.Embedded.Path)
	if len(rep.Damage) == 0 {
		fmt.Fprintln(w, "no damage found")
		return nil
	}
	for _, d := range rep.Damage {
		fmt.Fprintf(w, "damaged: %s\n", d)
	}
	fmt.Fprintln(w, "The advances in the damaged parts are lost. Before serving, raise the fences from the newest export\n"+
		"(fencegate fence import) or the objects' stamps (fencegate fence rebuild): docs/recovery.md.")
	return nil
}
