package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"
)

// fenceCmd talks to a running gateway's admin API: the embedded store is
// opened exclusively by the gateway, so operators go through it.
type fenceCmd struct{}

func (c *fenceCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("fence", "show|advance [-admin URL] RESOURCE [TOKEN] | export|import|rebuild -c FILE ...")
	admin := fs.String("admin", envOr("FENCEGATE_ADMIN", "http://127.0.0.1:9090"), "admin listener `URL` (env FENCEGATE_ADMIN)")
	if len(args) == 0 {
		return usagef("missing subcommand: show or advance")
	}
	sub := args[0]
	if mk, ok := fenceStoreCmds[sub]; ok {
		return mk().Run(ctx, args[1:])
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	var resp *http.Response
	var err error
	switch sub {
	case "show":
		if fs.NArg() != 1 {
			return usagef("show takes one RESOURCE")
		}
		resp, err = client.Get(*admin + "/v1/fences?resource=" + url.QueryEscape(fs.Arg(0)))
	case "advance":
		if fs.NArg() != 2 {
			return usagef("advance takes RESOURCE TOKEN")
		}
		tok, perr := strconv.ParseInt(fs.Arg(1), 10, 64)
		if perr != nil || tok <= 0 {
			return usagef("TOKEN must be a positive integer, got %q", fs.Arg(1))
		}
		body, _ := json.Marshal(map[string]any{"resource": fs.Arg(0), "token": tok, "owner": "cli"})
		resp, err = client.Post(*admin+"/v1/fences/advance", "application/json", bytes.NewReader(body))
	default:
		return usagef("unknown subcommand %q: want show or advance", sub)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("admin API answered %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	os.Stdout.Write(b)
	return nil
}

// fenceStoreCmds are the fence subcommands that work on the store itself
// rather than through the admin API (fence_export.go).
var fenceStoreCmds = map[string]func() command{
	"export":  func() command { return &fenceExportCmd{} },
	"import":  func() command { return &fenceImportCmd{} },
	"rebuild": func() command { return &fenceRebuildCmd{} },
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
