package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Shared fence mode behind PgBouncer: in session mode `fencegate doctor`
// passes and the replicas fence (a stale write through the other replica is
// refused); in transaction mode doctor fails naming pool_mode, and serve
// refuses to start with the same words.
func TestSharedBehindPgBouncer(t *testing.T) {
	pg := testenv.Postgres(t)
	up := newSharedUpstream(t)
	bin := testenv.BuildBinary(t, "./cmd/fencegate")
	// The schema first, directly (migrations take a session-level lock).
	first := startFencegate(t, sharedYAML("shared", pg.URL, up.url, false))
	first.Kill9()
	run := func(t *testing.T, args ...string) (int, string) {
		cmd := exec.Command(bin, args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	config := func(t *testing.T, db string) string {
		y := sharedYAML("shared", db, up.url, false)
		y = strings.ReplaceAll(y, "$GATEWAY", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
		y = strings.ReplaceAll(y, "$ADMIN", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
		p := filepath.Join(t.TempDir(), "fencegate.yaml")
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("session", func(t *testing.T) {
		db := testenv.PgBouncer(t, pg, "session")
		if code, out := run(t, "doctor", "-c", config(t, db)); code != 0 || !strings.Contains(out, "store.postgres: ok") {
			t.Fatalf("doctor behind PgBouncer in session mode: exit %d:\n%s", code, out)
		}
		r := sharedReplicas(t, 2, sharedYAML("shared", db, up.url, false))
		if st, body := write(t, "PUT", r[0].URL("gateway")+"/orders/pb", "2", "B"); st != 200 {
			t.Fatalf("write: %d %s", st, body)
		}
		st, body := write(t, "PUT", r[1].URL("gateway")+"/orders/pb", "1", "A")
		wantCode(t, "stale write through the other replica", st, body, 409, "stale_fencing_token")
		// The upstream's record: B's write landed, A's never reached it.
		if got, want := recorder.Summary(up.rec.HistoryOf("/orders/pb")), "PUT B@2"; got != want {
			t.Fatalf("upstream applied %q; want %q", got, want)
		}
		if v, _ := up.rec.Get("/orders/pb"); v != "B" {
			t.Fatalf("upstream holds %q; want B's value", v)
		}
	})

	t.Run("transaction", func(t *testing.T) {
		db := testenv.PgBouncer(t, pg, "transaction")
		cfg := config(t, db)
		code, out := run(t, "doctor", "-c", cfg)
		if code != 1 || !strings.Contains(out, "store.postgres: FAIL") || !strings.Contains(out, "pool_mode = session") {
			t.Fatalf("doctor behind PgBouncer in transaction mode: exit %d; want 1 naming pool_mode:\n%s", code, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		serveOut, err := exec.CommandContext(ctx, bin, "serve", "-c", cfg).CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("serve started behind PgBouncer in transaction mode (killed after 30 s):\n%s", serveOut)
		}
		if err == nil || !strings.Contains(string(serveOut), "pool_mode = session") {
			t.Fatalf("serve behind PgBouncer in transaction mode: %v; want a refusal naming pool_mode:\n%s", err, serveOut)
		}
	})
}
