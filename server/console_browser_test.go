package server_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/fencegate/fencegate/internal/testenv"
)

func chromium(t *testing.T) string {
	t.Helper()
	p, err := testenv.LookBinary("chromium")
	if err != nil {
		if testenv.CI() {
			t.Fatalf("chromium is not installed (CI=true, so this is a failure, not a skip): run scripts/deps.sh")
		}
		t.Skipf("chromium is not installed: run scripts/deps.sh")
	}
	return p
}

// browser starts headless Chromium with a fresh profile that sends the
// admin key on every request.
func browser(t *testing.T, headers map[string]any) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 760),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelT(); cancelB(); cancelA() })
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers(headers)}); err != nil {
		t.Fatalf("chromium headers: %v", err)
	}
	return ctx
}

// screenshotDir is where the pages' screenshots go. By default a
// directory of the test's own ($FENCEGATE_TEST_ARTIFACTS/console when that
// is set, so CI can keep them, else t.TempDir()), so a test run leaves the
// work tree alone. FENCEGATE_UPDATE_SCREENSHOTS=1 writes them into
// docs/console, the documentation's images; FENCEGATE_SCREENSHOT_DIR names
// a directory of its own.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("FENCEGATE_SCREENSHOT_DIR"); d != "" {
		return d
	}
	if os.Getenv("FENCEGATE_UPDATE_SCREENSHOTS") == "1" {
		root, err := testenv.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Join(root, "docs", "console")
	}
	if d := os.Getenv("FENCEGATE_TEST_ARTIFACTS"); d != "" {
		return filepath.Join(d, "console")
	}
	return t.TempDir()
}

func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := screenshotDir(t)
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func texts(t *testing.T, ctx context.Context, sel string) []string {
	t.Helper()
	js := fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map(e => e.textContent.trim())`, sel)
	return eval[[]string](t, ctx, js)
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("%s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// TestConsoleBrowser loads every page in headless Chromium against a
// running gateway with real fences, leases and refusals, checks the DOM
// for the values it made, follows the pagination and the link to one
// fence, and saves the screenshots of docs/console.md.
func TestConsoleBrowser(t *testing.T) {
	e := startConsole(t)
	ctx := browser(t, map[string]any{"Authorization": "Bearer " + consoleKey})
	nav := func(path string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(e.admin+path), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
	}

	nav("/")
	if got := text(t, ctx, "#fence-mode"); got != "local" {
		t.Errorf("fence mode %q; want local", got)
	}
	if got := text(t, ctx, "#ready"); got != "ready" {
		t.Errorf("readiness %q; want ready", got)
	}
	if got := text(t, ctx, "#store"); !strings.HasPrefix(got, "embedded ") {
		t.Errorf("store %q; want embedded …", got)
	}
	shoot(t, ctx, "overview.png")

	nav("/routes")
	if got := texts(t, ctx, "#routes td.name"); !slices.Equal(got, []string{"orders"}) {
		t.Errorf("routes %q; want [orders]", got)
	}
	if f, r := text(t, ctx, "#routes td.forwarded"), text(t, ctx, "#routes td.refused"); f != "1" || r != "2" {
		t.Errorf("forwarded %s, refused %s; want 1, 2", f, r)
	}
	shoot(t, ctx, "routes.png")

	// Pagination: every bulk fence exactly once, in order, over pages.
	nav("/fences?prefix=/bulk/&limit=100")
	var listed []string
	for pages := 1; ; pages++ {
		listed = append(listed, texts(t, ctx, "#fences td.resource")...)
		if eval[int](t, ctx, `document.querySelectorAll("#next").length`) == 0 {
			if pages != 3 {
				t.Errorf("%d pages of 100 for %d fences; want 3", pages, len(e.bulk))
			}
			break
		}
		if err := clickAndLoad(ctx, "#next"); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(listed, e.bulk) {
		t.Fatalf("paged listing has %d fences (first %q); want the %d bulk fences in order", len(listed), listed[:min(3, len(listed))], len(e.bulk))
	}

	nav("/fences?limit=12&after=/bulk/224")
	shoot(t, ctx, "fences.png")
	// Follow the link to one fence.
	if err := clickAndLoad(ctx, `#fences a[href="/fence?resource=%2forders%2f1"]`); err != nil {
		t.Fatalf("follow the link to /orders/1: %v", err)
	}
	if got := text(t, ctx, "#fence .resource"); got != "/orders/1" {
		t.Errorf("fence page of %q; want /orders/1", got)
	}
	if got := text(t, ctx, "#fence .owner"); got != "worker-2" {
		t.Errorf("fence owner %q; want worker-2 (the hand advance)", got)
	}
	if got := text(t, ctx, "#lease"); !strings.Contains(got, "worker-1") {
		t.Errorf("lease %q; want held by worker-1", got)
	}
	if got := texts(t, ctx, "table.refusals td.code"); !slices.Equal(got, []string{"stale_fencing_token"}) {
		t.Errorf("refusals of /orders/1: %q; want [stale_fencing_token]", got)
	}
	shoot(t, ctx, "fence.png")

	nav("/leases")
	if got := texts(t, ctx, "#leases td.owner"); !slices.Equal(got, []string{"worker-1"}) {
		t.Errorf("lease owners %q; want [worker-1]", got)
	}
	shoot(t, ctx, "leases.png")

	nav("/refusals")
	codes := texts(t, ctx, "table.refusals td.code")
	if !slices.Equal(codes, []string{"missing_fencing_token", "stale_fencing_token"}) {
		t.Errorf("refusal codes %q; want newest first [missing_fencing_token stale_fencing_token]", codes)
	}
	hrefs := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("a.trace")).map(a => a.href)`)
	if len(hrefs) != 2 || !strings.HasPrefix(hrefs[0], "http://jaeger.example:16686/trace/") {
		t.Errorf("trace links %q; want two links into the Jaeger UI", hrefs)
	}
	shoot(t, ctx, "refusals.png")

	// The hostile key and owner are text, never markup. The fence API
	// stores the canonical form of the key (its quotes and brackets
	// percent-encoded, its & as is); the owner is stored as sent.
	var stored struct{ Resource string }
	e.getJSON(t, "/v1/fences?resource="+url.QueryEscape(evilKey), &stored)
	nav("/fences?prefix=/evil/")
	if got := texts(t, ctx, "#fences td.resource"); !slices.Equal(got, []string{stored.Resource}) {
		t.Errorf("hostile resource shown as %q; want the literal key", got)
	}
	if got := texts(t, ctx, "#fences td.owner"); !slices.Equal(got, []string{evilOwner}) {
		t.Errorf("hostile owner shown as %q; want the literal owner", got)
	}
	title := eval[string](t, ctx, `document.title`)
	scripts := eval[int](t, ctx, `document.querySelectorAll("body script, b[x]").length`)
	if title == "pwned" || scripts != 0 {
		t.Errorf("hostile values became markup: title %q, %d injected elements", title, scripts)
	}
	if err := clickAndLoad(ctx, "#fences td.resource a"); err != nil {
		t.Fatal(err)
	}
	if got := text(t, ctx, "#fence .resource"); got != stored.Resource {
		t.Errorf("fence page of the hostile key shows %q", got)
	}
	if title := eval[string](t, ctx, `document.title`); title == "pwned" {
		t.Error("hostile key ran script on its fence page")
	}
}

// clickAndLoad clicks the element sel and waits for the page it loads.
func clickAndLoad(ctx context.Context, sel string) error {
	_, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	return err
}
