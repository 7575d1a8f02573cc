package console

import (
	"context"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestLoginRedirectBrowser logs in with Chromium through the login form,
// each time with a next that a browser reads as "//evil" once cleaned
// (issue 43), and reads where the browser went: the overview of this
// listener.
func TestLoginRedirectBrowser(t *testing.T) {
	chromium, err := testenv.LookBinary("chromium")
	if err != nil {
		if testenv.CI() {
			t.Fatal("chromium is not installed (CI=true, so this is a failure, not a skip): run scripts/deps.sh")
		}
		t.Skip("chromium is not installed: run scripts/deps.sh")
	}
	srv := httptest.NewServer(loginMux(t, &fakeSessions{key: "right"}))
	t.Cleanup(srv.Close)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-dev-shm-usage", true),
		// "evil" would otherwise be looked up in DNS: map every other
		// name to nothing, so a browser sent there shows an error page.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"))
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelT(); cancelB(); cancelA() })

	for _, next := range []string{"/./\\evil", "/a/../\\evil", "/\t/evil"} {
		login := srv.URL + "/login?next=" + url.QueryEscape(next)
		err := chromedp.Do(ctx,
			chromedp.Navigate(login),
			chromedp.SendKeys(chromedp.CSS("#key"), "right"),
			chromedp.Submit(chromedp.CSS("#login")))
		if err != nil {
			t.Fatalf("next %q: %v", next, err)
		}
		// Wait for the navigation the form's post starts.
		var loc string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if loc, err = chromedp.Run(ctx, chromedp.Location()); err == nil && loc != login {
				break
			}
		}
		// Where the login sends it, cleaned and checked: the overview.
		// (Before, the redirect to //evil was either followed or, where
		// the page's CSP form-action stopped it, left the browser on the
		// login form, logged in nowhere it could see.)
		if loc != srv.URL+"/" {
			t.Errorf("next %q: the browser is at %q; want %s/", next, loc, srv.URL)
		}
	}
}
