package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencegate/fencegate"
)

// fenceCmd is one of the fence subcommands that talk to a running
// gateway's admin API: the embedded store is opened exclusively by the
// gateway, so operators go through it.
type fenceCmd struct {
	printer
	sub        string // show, advance, reset
	admin, key string
	to         int64
	confirm    bool
}

const fenceAdminHelp = `The admin listener is --admin (env FENCEGATE_ADMIN); its API key is read
from FENCEGATE_API_KEY (or --api-key).`

func newFenceCmd() *cobra.Command {
	subs := []subcommand{
		{"show RESOURCE", "print the fence record",
			"Show prints the fence record of RESOURCE as JSON: the highest token\naccepted, its owner, when, and the ETag the gateway knows.",
			"  fencegate fence show /orders/7 --admin http://127.0.0.1:9090"},
		{"advance RESOURCE TOKEN", "raise the fence to TOKEN",
			"Advance raises the fence of RESOURCE to TOKEN, so that every older token is\nrefused from now on: at most fence.max_advance above the highest token\nissued, or the fence's highest.",
			"  fencegate fence advance /orders/7 50"},
		{"reset RESOURCE --to T --confirm [flags]", "lower a fence raised by mistake to T",
			"Reset lowers the fence of RESOURCE to T; refused unless no token above T\nwas ever issued for RESOURCE. On store.etcd, T must be the token of\nRESOURCE's current lock holder, vouched for by the token_source of every\nroute that may write RESOURCE. It needs --confirm.",
			"  fencegate fence reset /orders/7 --to 42 --confirm"},
	}
	var cmds []*cobra.Command
	for _, s := range subs {
		c := &fenceCmd{sub: strings.Fields(s.use)[0]}
		args := []string{"RESOURCE"}
		if c.sub == "advance" {
			args = append(args, "TOKEN")
		}
		cmd := s.command(fenceAdminHelp, args...)
		fs := cmd.Flags()
		adminFlags(fs, &c.admin, &c.key)
		fs.Int64Var(&c.to, "to", 0, "reset: the new highest token")
		fs.BoolVar(&c.confirm, "confirm", false, "reset: yes, lower this fence")
		if c.sub != "reset" {
			// Accepted, as they always were, but they do nothing here.
			fs.MarkHidden("to")
			fs.MarkHidden("confirm")
		}
		cmds = append(cmds, wrap(cmd, c))
	}
	cmds = append(cmds, newListCmd("fences"), newFenceExportCmd(), newFenceImportCmd(), newFenceRebuildCmd(), newFenceRecoverCmd(), newFenceSalvageCmd())
	return group(&cobra.Command{
		Use:   "fence",
		Short: "show, advance, reset, list, export, import or rebuild fences",
		Long: `Fence inspects and changes the fences: show, advance, reset and list go
through a running gateway's admin API; export, import, rebuild and
salvage-log open the store itself (stop the gateway first on the embedded
store).

` + fenceAdminHelp,
		Example: `  fencegate fence show /orders/7
  fencegate fence advance /orders/7 50
  fencegate fence list --prefix /orders/ -o json
  fencegate fence export -c fencegate.yaml -o fences.jsonl`,
	}, cmds...)
}

func (c *fenceCmd) Run(ctx context.Context, args []string) error {
	// Longer than the default drain timeout: on etcd an advance returns once
	// the older writes in flight have ended, up to the drain timeout.
	cl := &adminClient{base: c.admin, key: apiKey(c.key), http: &http.Client{Timeout: fencegate.DefaultDrainTimeout + 10*time.Second}}
	var resp *http.Response
	var err error
	switch c.sub {
	case "show":
		resp, err = cl.send(ctx, http.MethodGet, "/v1/fences?resource="+url.QueryEscape(args[0]), nil)
	case "advance":
		tok, perr := strconv.ParseInt(args[1], 10, 64)
		if perr != nil || tok <= 0 {
			return usagef("TOKEN must be a positive integer, got %q", args[1])
		}
		resp, err = cl.send(ctx, http.MethodPost, "/v1/fences/advance", map[string]any{"resource": args[0], "token": tok, "owner": "cli"})
	case "reset":
		if c.to <= 0 {
			return usagef("reset needs --to, a positive token")
		}
		if !c.confirm {
			return usagef("reset lowers a fence: add --confirm if you mean it")
		}
		resp, err = cl.send(ctx, http.MethodPost, "/v1/fences/reset", map[string]any{"resource": args[0], "to": c.to, "confirm": args[0], "owner": "cli"})
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(c.stdout(), io.LimitReader(resp.Body, 1<<20))
	return err
}
