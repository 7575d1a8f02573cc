package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

// A SIGHUP that changes how a route builds resource
// keys (here: adding case_insensitive) would move every resource to a
// fresh, empty fence, where a stale token is accepted. The reload is refused
// and the old configuration keeps serving until the operator confirms the
// change by changing the route's key_version.
func TestReloadRefusesKeyChange(t *testing.T) {
	rec, up := newUpstream(t)
	p := startFencegate(t, gatewayYAML(up))
	gw := p.URL("gateway")
	if st, body := write(t, "PUT", gw+"/orders/A", "42", "new-owner"); st != 200 {
		t.Fatalf("write 42: %d %s", st, body)
	}
	orig, err := os.ReadFile(p.CfgPath)
	if err != nil {
		t.Fatal(err)
	}
	// The same reload also adds a route: none of it may apply.
	folded := strings.Replace(string(orig), `      resource: "{path}"`, `      resource: "{path}"
      case_insensitive: true
    - name: invoices
      match: {path_prefix: /invoices/}
      upstream: {url: "`+up+`"}
      resource: "{path}"`, 1)
	if err := os.WriteFile(p.CfgPath, []byte(folded), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGHUP)
	waitFor(t, func() bool { return strings.Contains(p.Log(), "reload refused") })
	refusal := logLine(p.Log(), "reload refused")
	for _, want := range []string{`"level":"WARN"`, "gateway.routes[0].case_insensitive", "false -\u003e true", "key_version"} {
		if !strings.Contains(refusal, want) {
			t.Errorf("refusal log does not say %q:\n%s", want, refusal)
		}
	}
	if strings.Contains(p.Log(), "configuration reloaded") {
		t.Fatal("the refused configuration was reported as reloaded")
	}
	// The old fence still guards /orders/A: the stale owner is refused.
	if st, body := write(t, "PUT", gw+"/orders/A", "41", "stale-owner"); st != 409 {
		t.Fatalf("stale token 41 after the refused reload: %d %s; want 409", st, body)
	}
	if st, _ := write(t, "PUT", gw+"/invoices/1", "1", "x"); st != 404 {
		t.Fatalf("route of the refused reload serves: %d; want 404", st)
	}

	// Confirmed: key_version changes with it. The reload applies and says
	// at WARN that the route's resources start on fresh fences.
	confirmed := strings.Replace(folded, "      case_insensitive: true\n", "      case_insensitive: true\n      key_version: 2\n", 1)
	if err := os.WriteFile(p.CfgPath, []byte(confirmed), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGHUP)
	waitFor(t, func() bool { return strings.Contains(p.Log(), "configuration reloaded") })
	if !strings.Contains(p.Log(), "reload changed how resource keys are built") {
		t.Fatalf("a confirmed key change is not logged:\n%s", p.log.Tail(10))
	}
	if st, body := write(t, "PUT", gw+"/invoices/1", "1", "x"); st != 200 {
		t.Fatalf("after the confirmed reload /invoices/: %d %s; want 200", st, body)
	}
	// What the refusal protected against: the folded key /orders/a has a
	// fresh fence, so token 41 passes now. The operator confirmed exactly
	// this (e.g. after raising the new keys' fences by hand).
	if st, body := write(t, "PUT", gw+"/orders/A", "41", "after-confirm"); st != 200 {
		t.Fatalf("token 41 on the new key after the confirmed change: %d %s; want 200", st, body)
	}
	if got := applied(rec, "/orders/A"); got != "PUT new-owner@42, PUT after-confirm@41" {
		t.Fatalf("upstream applied %q", got)
	}
}

// logLine is the first line of log that contains s.
func logLine(log, s string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}
