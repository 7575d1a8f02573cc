package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/console"
	"github.com/spf13/cobra"
)

// listCmd prints one of the admin listener's listings (the operator
// console's JSON API) as an aligned table, or as JSON with -o json:
//
//	fencegate fence list [--prefix P]   GET /v1/fences, every page
//	fencegate lease list [--prefix P]   GET /v1/leases, every page
//	fencegate refusals                  GET /v1/refusals
//
// With admin.auth configured, the key comes from FENCEGATE_API_KEY (or
// --api-key), as for fence show and advance.
type listCmd struct {
	printer
	what                       string // fences, leases, refusals
	admin, key, prefix, format string
}

func newListCmd(what string) *cobra.Command {
	c := &listCmd{what: what}
	cmd := &cobra.Command{
		Use:   "list [--prefix P] [-o table|json]",
		Short: "list " + what + " (admin API, every page)",
		Long: "List prints every " + strings.TrimSuffix(what, "s") + ` the admin listener knows, page after page, as an
aligned table or, with -o json, as one JSON array. The admin listener is
--admin (env FENCEGATE_ADMIN); its API key is read from FENCEGATE_API_KEY
(or --api-key).`,
		Example: "  fencegate " + map[string]string{"fences": "fence", "leases": "lease"}[what] + " list --prefix /orders/ -o json",
		Args:    noArgs,
	}
	if what == "refusals" {
		cmd.Use = "refusals [-o table|json]"
		cmd.Short = "print the gateway's recent refusals (admin API)"
		cmd.Long = `Refusals prints the gateway's recent refusals (stale tokens, missing tokens,
unavailable fences) with their route, resource, tokens and trace id, newest
first. The admin listener is --admin (env FENCEGATE_ADMIN); its API key is
read from FENCEGATE_API_KEY (or --api-key).`
		cmd.Example = "  fencegate refusals\n  fencegate refusals -o json | jq '.[0]'"
	}
	fs := cmd.Flags()
	adminFlags(fs, &c.admin, &c.key)
	if what != "refusals" {
		fs.StringVar(&c.prefix, "prefix", "", "only resources starting with `P`")
	}
	fs.StringVarP(&c.format, "output", "o", "table", "output: table or json")
	choice(cmd, "output", "table", "json")
	return wrap(cmd, c)
}

func (c *listCmd) Run(ctx context.Context, args []string) error {
	if err := checkChoice("o", c.format, "table", "json"); err != nil {
		return err
	}
	out := c.stdout()
	cl := &adminClient{base: c.admin, key: apiKey(c.key), http: &http.Client{Timeout: 30 * time.Second}}
	if c.what == "refusals" {
		var p console.RefusalPage
		if err := cl.get(ctx, "/v1/refusals", &p); err != nil {
			return err
		}
		if c.format == "json" {
			return json.NewEncoder(out).Encode(p.Refusals)
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tROUTE\tRESOURCE\tTOKEN\tHIGHEST\tCODE\tOWNER\tTRACE")
		for _, r := range p.Refusals {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Time.UTC().Format(time.RFC3339), dash(r.Route), dash(r.Resource),
				num(r.Token), num(r.Highest), r.Code, dash(r.Owner), dash(r.TraceID))
		}
		return tw.Flush()
	}
	return c.pages(ctx, cl, out, c.prefix, c.format == "json")
}

// pages walks every page of a listing: memory stays one page; the table is
// aligned per page (a page is up to console.MaxLimit rows). JSON output is
// one array, written as the pages arrive.
func (c *listCmd) pages(ctx context.Context, cl *adminClient, out io.Writer, prefix string, asJSON bool) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if asJSON {
		io.WriteString(out, "[")
	} else if c.what == "fences" {
		fmt.Fprintln(tw, "RESOURCE\tHIGHEST\tOWNER\tUPDATED\tINFLIGHT\tDRAINED\tETAG")
	} else {
		fmt.Fprintln(tw, "RESOURCE\tOWNER\tTOKEN\tHELD\tEXPIRES")
	}
	first, after := true, ""
	for {
		q := url.Values{"limit": {strconv.Itoa(console.MaxLimit)}}
		if prefix != "" {
			q.Set("prefix", prefix)
		}
		if after != "" {
			q.Set("after", after)
		}
		var rows []any
		var next string
		if c.what == "fences" {
			var p console.FencePage
			if err := cl.get(ctx, "/v1/fences?"+q.Encode(), &p); err != nil {
				return err
			}
			for _, f := range p.Fences {
				rows = append(rows, f)
				if !asJSON {
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\n", f.Resource, f.Highest, dash(f.Owner),
						stamp(f.UpdatedAt), f.InFlight, yesNo(f.Ready), dash(f.ETag))
				}
			}
			next = p.Next
		} else {
			var p console.LeasePage
			if err := cl.get(ctx, "/v1/leases?"+q.Encode(), &p); err != nil {
				return err
			}
			for _, l := range p.Leases {
				rows = append(rows, l)
				if !asJSON {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", l.Resource, dash(l.Owner), l.Token, yesNo(l.Held), stamp(l.ExpiresAt))
				}
			}
			next = p.Next
		}
		if asJSON {
			for _, r := range rows {
				b, _ := json.Marshal(r)
				if !first {
					io.WriteString(out, ",")
				}
				first = false
				io.WriteString(out, "\n")
				out.Write(b)
			}
		} else if err := tw.Flush(); err != nil {
			return err
		}
		if next == "" {
			break
		}
		after = next
	}
	if asJSON {
		io.WriteString(out, "\n]\n")
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func num(n int64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// adminClient reads the admin listener's JSON API.
type adminClient struct {
	base, key string
	http      *http.Client
}

func (c *adminClient) get(ctx context.Context, path string, v any) error {
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// send makes one request to the admin API (body, if not nil, as JSON) with
// the key; an answer other than 200 is returned as an error that quotes
// it.
func (c *adminClient) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, unreachable(err, "admin", "FENCEGATE_ADMIN", c.base)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		return nil, fmt.Errorf("admin API answered %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return resp, nil
}
