package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// A coordinator-only process in shared fence mode (its own process, fence
// on issuance into the shared database) killed with SIGKILL leaves nothing
// for drains to wait out: it runs no gateway, so it holds no marker session
// (one registered with the default 30s forward timeout made every drain in
// the database wait 30s after such a death). A newer token's write through
// a gateway replica right after the kill is admitted at once.
func TestSharedCoordinatorOnlyDeathDoesNotStallDrains(t *testing.T) {
	pg := testenv.Postgres(t)
	up := newSharedUpstream(t)
	gw := startFencegate(t, sharedYAML("shared", pg.URL, up.url, false))
	coord := startFencegate(t, fmt.Sprintf(`
store:
  postgres: {url: %q, timeout: 2s}
fence: {mode: shared}
coordinator: {enabled: true, listen: $COORDINATOR, default_ttl: 1s}
admin: {listen: $ADMIN}
`, pg.URL+"&application_name=fg_coord_only"))
	sharedAcquire(t, coord.URL("coordinator"), "/orders/other", "w") // it serves
	if n := markerSessions(t, pg.URL); n != 1 {
		t.Fatalf("%d marker sessions registered; want the gateway's 1 (fence.marker_conns default; the coordinator alone opens none)", n)
	}
	const key = "/orders/co-1"
	if st, body := write(t, "PUT", gw.URL("gateway")+key, "1", "a"); st != 200 {
		t.Fatalf("first write: %d %s", st, body)
	}
	if pgBackends(t, pg.URL, "fg_coord_only") == 0 {
		t.Fatal("no database session of the coordinator-only process (application_name fg_coord_only)")
	}
	coord.Kill9()
	// The database ended its sessions (a marker session of it, as before
	// the fix, is then found lost and waited out).
	waitFor(t, func() bool { return pgBackends(t, pg.URL, "fg_coord_only") == 0 })
	start := time.Now()
	st, body := write(t, "PUT", gw.URL("gateway")+key, "2", "b")
	if st != 200 || time.Since(start) > 2*time.Second {
		t.Fatalf("newer write after the coordinator-only process died: %d %s after %s; want 200 at once", st, body, time.Since(start))
	}
}

// pgBackends counts the database's sessions of application name app.
func pgBackends(t *testing.T, url, app string) int {
	t.Helper()
	return pgCount(t, url, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app)
}

// markerSessions counts the registered marker sessions not found gone.
func markerSessions(t *testing.T, url string) int {
	t.Helper()
	return pgCount(t, url, `SELECT count(*) FROM fence_session WHERE dead_at IS NULL`)
}

// pgCount runs a count query on the database at url.
func pgCount(t *testing.T, url, query string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
