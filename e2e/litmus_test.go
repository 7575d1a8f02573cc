package e2e

import (
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestLitmus runs litmus, the WebDAV server test suite, through the gateway
// against Apache mod_dav, on a plain route and on a `precondition: etag`
// route naming the WebDAV methods, and on a route with the default
// fenced_methods (collections by method), twice on the same store (the gateway restarted in between): every
// test passes both times. A header hop in front of the gateway stands for
// the workers: it adds a Fencing-Token from a counter, one newer token per
// request, continuing across the runs. So the second run meets everything
// the first left in the store (fences at every path litmus uses, the ETag
// records of objects its collection DELETEs and MOVEs removed), and every
// write advances its fences (a drain per request, hierarchical keys raised
// from below and above).
func TestLitmus(t *testing.T) {
	bin := testenv.Litmus(t)
	for _, tc := range []struct{ name, pre, fenced string }{{"plain", "", davFenced}, {"etag", "etag", davFenced}, {"default", "", ""}} {
		name := tc.name
		t.Run(name, func(t *testing.T) {
			a := testenv.Apache(t)
			p := startFencegate(t, httpGatewayYAML(httpRouteYAML("dav", "", a.URL, tc.pre, "10s")+tc.fenced))
			var token atomic.Int64
			token.Store(100)
			hop := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(&url.URL{Scheme: "http", Host: p.addrs["gateway"]})
				pr.Out.Host = pr.In.Host // Destination names the hop's host
				pr.Out.Header.Set("Fencing-Token", strconv.FormatInt(token.Add(1), 10))
			}})
			defer hop.Close()
			for run := 1; run <= 2; run++ {
				if run == 2 {
					p.Restart()
				}
				out := runLitmus(t, bin, hop.URL+"/")
				if m := litmusFailed.FindAllStringSubmatch(out, -1); len(m) > 0 || !litmusSummary.MatchString(out) {
					t.Fatalf("litmus run %d through the gateway (%s route):\n%s", run, name, out)
				}
				t.Logf("litmus run %d: %d summaries, all passed", run, len(litmusSummary.FindAllString(out, -1)))
			}
		})
	}
}

var (
	litmusSummary = regexp.MustCompile(`<- summary for .*: of \d+ tests run: \d+ passed, 0 failed`)
	litmusFailed  = regexp.MustCompile(`(?m)^.*\.\.\. FAIL.*$|: of \d+ tests run: \d+ passed, [1-9]\d* failed`)
)

func runLitmus(t *testing.T, bin, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, url)
	cmd.Dir = t.TempDir() // litmus writes debug.log and child.log here
	out, err := cmd.CombinedOutput()
	if err != nil && ctx.Err() != nil {
		t.Fatalf("litmus timed out:\n%s", out)
	}
	// litmus exits non-zero when a test fails; the output says which.
	_ = err
	return string(out)
}
