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

const fenceSynopsis = `show|advance|reset [flags] RESOURCE [TOKEN] | export|import|rebuild -c FILE ...

  show RESOURCE                      print the fence record
  advance RESOURCE TOKEN             raise the fence to TOKEN (at most
                                     fence.max_advance above the highest
                                     token issued, or the fence's highest)
  reset -to T -confirm RESOURCE      lower a fence raised by mistake to T;
                                     refused unless no token above T was
                                     ever issued for RESOURCE
  list [-prefix P] [-o json]         list fences (every page; list.go)

Flags come before RESOURCE. The admin API key is read from
FENCEGATE_API_KEY (or -api-key).`

func (c *fenceCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("fence", fenceSynopsis)
	admin := fs.String("admin", envOr("FENCEGATE_ADMIN", "http://127.0.0.1:9090"), "admin listener `URL` (env FENCEGATE_ADMIN)")
	key := fs.String("api-key", "", "admin API `key` (default env FENCEGATE_API_KEY; prefer the environment: flags show in ps)")
	to := fs.Int64("to", 0, "reset: the new highest token")
	confirm := fs.Bool("confirm", false, "reset: yes, lower this fence")
	if len(args) == 0 {
		return usagef("missing subcommand: show, advance, reset or list")
	}
	if ok, err := listSub(ctx, "fences", args); ok { // list.go
		return err
	}
	sub := args[0]
	if mk, ok := fenceStoreCmds[sub]; ok {
		return mk().Run(ctx, args[1:])
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	// Also accept flags after RESOURCE (fence reset R -to T -confirm).
	if fs.NArg() > 1 && len(fs.Arg(1)) > 0 && fs.Arg(1)[0] == '-' {
		rest := append([]string(nil), fs.Args()...)
		if err := parseFlags(fs, rest[1:]); err != nil {
			return err
		}
		if fs.NArg() != 0 {
			return usagef("unexpected argument %q", fs.Arg(0))
		}
		args = rest[:1]
	} else {
		args = fs.Args()
	}
	client := &http.Client{Timeout: 10 * time.Second}
	var req *http.Request
	var err error
	post := func(path string, v any) (*http.Request, error) {
		body, _ := json.Marshal(v)
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, *admin+path, bytes.NewReader(body))
		if err == nil {
			r.Header.Set("Content-Type", "application/json")
		}
		return r, err
	}
	switch sub {
	case "show":
		if len(args) != 1 {
			return usagef("show takes one RESOURCE")
		}
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, *admin+"/v1/fences?resource="+url.QueryEscape(args[0]), nil)
	case "advance":
		if len(args) != 2 {
			return usagef("advance takes RESOURCE TOKEN")
		}
		tok, perr := strconv.ParseInt(args[1], 10, 64)
		if perr != nil || tok <= 0 {
			return usagef("TOKEN must be a positive integer, got %q", args[1])
		}
		req, err = post("/v1/fences/advance", map[string]any{"resource": args[0], "token": tok, "owner": "cli"})
	case "reset":
		if len(args) != 1 {
			return usagef("reset takes one RESOURCE (and -to T -confirm)")
		}
		if *to <= 0 {
			return usagef("reset needs -to, a positive token")
		}
		if !*confirm {
			return usagef("reset lowers a fence: add -confirm if you mean it")
		}
		req, err = post("/v1/fences/reset", map[string]any{"resource": args[0], "to": *to, "confirm": args[0], "owner": "cli"})
	default:
		return usagef("unknown subcommand %q: want show, advance or reset", sub)
	}
	if err != nil {
		return err
	}
	if k := apiKey(*key); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	resp, err := client.Do(req)
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

// apiKey is the -api-key flag, else FENCEGATE_API_KEY.
func apiKey(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv("FENCEGATE_API_KEY")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
