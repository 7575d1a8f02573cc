package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// The ETag bookkeeping of the S3 adapter on the fence table: recorded only
// on an existing fence, never regressing to an older token's ETag, never
// touching the fence itself, and kept across advances and reopening.
func TestETagRecordAndLoad(t *testing.T) {
	pg := testenv.Postgres(t)
	st := openFenceStore(t, pg.URL, Options{})
	ctx := context.Background()
	const res = "fenced/reports/q1.csv"

	if got, err := st.LastETag(ctx, res); err != nil || got != "" {
		t.Fatalf("LastETag of an unknown resource = %q, %v; want empty", got, err)
	}
	if err := st.RecordETag(ctx, res, 1, "e1"); err == nil || !strings.Contains(err.Error(), "no fence record") {
		t.Fatalf("RecordETag without a fence: %v; want no fence record", err)
	}
	if _, err := st.AdvanceFence(ctx, res, 3, "w3"); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name  string
		token int64
		etag  string
		want  string
	}{
		{"first", 3, "e3", "e3"},
		{"same token replaces", 3, "e3b", "e3b"},
		{"outcome unknown", 3, "?", "?"},
		{"older token ignored", 2, "old", "?"},
		{"learnt again", 3, "e3c", "e3c"},
		{"deleted", 3, "", ""},
		{"older cannot resurrect", 1, "zombie", ""},
	}
	for _, s := range steps {
		if err := st.RecordETag(ctx, res, s.token, s.etag); err != nil {
			t.Fatalf("%s: RecordETag(%d, %q): %v", s.name, s.token, s.etag, err)
		}
		if got, err := st.LastETag(ctx, res); err != nil || got != s.want {
			t.Fatalf("%s: LastETag = %q, %v; want %q", s.name, got, err, s.want)
		}
	}

	// An ETag recorded with a token above the fence (a write admitted by
	// another replica whose advance this one has not seen is impossible,
	// but a bug must not lower or raise the fence through this path).
	if err := st.RecordETag(ctx, res, 9, "e9"); err != nil {
		t.Fatal(err)
	}
	fs, err := st.LoadFence(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	if fs.Highest != 3 || fs.Owner != "w3" || !fs.Ready || fs.ETag != "e9" {
		t.Fatalf("fence after etag records = %+v; want highest 3, owner w3, ready, etag e9", fs)
	}
	if err := st.RecordETag(ctx, res, 5, "e5"); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.LastETag(ctx, res); got != "e9" {
		t.Fatalf("LastETag = %q after an older token's record; want e9", got)
	}

	// An advance keeps the ETag: it describes the object, not the token.
	if _, err := st.AdvanceFence(ctx, res, 10, "w10"); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.LastETag(ctx, res); got != "e9" {
		t.Fatalf("LastETag after an advance = %q; want e9", got)
	}
	if err := st.RecordETag(ctx, res, 10, "e10"); err != nil {
		t.Fatal(err)
	}

	// Durable in the database, seen by a fresh pool.
	st2 := openFenceStore(t, pg.URL, Options{})
	if got, err := st2.LastETag(ctx, res); err != nil || got != "e10" {
		t.Fatalf("LastETag from a new pool = %q, %v; want e10", got, err)
	}
	var highest, etagToken int64
	if err := st2.Pool.QueryRow(ctx, `SELECT highest, etag_token FROM fence WHERE resource = $1`, res).Scan(&highest, &etagToken); err != nil {
		t.Fatal(err)
	}
	if highest != 10 || etagToken != 10 {
		t.Fatalf("row: highest %d, etag_token %d; want 10, 10", highest, etagToken)
	}
}

// RecordETag raises synchronous_commit for its own transaction only (the
// session keeps its setting), and leaves the pooled connection idle, not
// inside a transaction, also when it fails.
func TestETagRecordLeavesSessionClean(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	st := openFenceStore(t, pg.URL, Options{MaxConns: 1})
	if _, err := st.Pool.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', false)`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AdvanceFence(ctx, "r", 1, ""); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordETag(ctx, "r", 1, "e1"); err != nil {
		t.Fatal(err)
	}
	// A failing record (no fence) rolls back and frees the connection.
	if err := st.RecordETag(ctx, "missing", 1, "x"); err == nil {
		t.Fatal("RecordETag without a fence succeeded")
	}
	conn, err := st.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	status := conn.Conn().PgConn().TxStatus()
	var sc string
	err = conn.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&sc)
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}
	if status != 'I' {
		t.Fatalf("the pooled connection was left in transaction status %q", status)
	}
	if sc != "off" {
		t.Fatalf("synchronous_commit of the session = %s; the record's setting must stay local to its transaction", sc)
	}
	if got, _ := st.LastETag(ctx, "r"); got != "e1" {
		t.Fatalf("LastETag = %q; want e1", got)
	}
}

// A reset lowers the ETag record's token with the fence (the version it
// names kept): left at the mistaken token's, every record of the new
// value's writes would be refused, and the holder's second write made
// conditional on a version its first replaced. The row is read back.
func TestResetLowersETagToken(t *testing.T) {
	pg := testenv.Postgres(t)
	st := openFenceStore(t, pg.URL, Options{})
	ctx := context.Background()
	const res = "fenced/reset/etag"
	if _, err := st.AdvanceFence(ctx, res, 900, "typo"); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordETag(ctx, res, 900, "e900"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ResetFence(ctx, res, 5, "ops"); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordETag(ctx, res, 5, "e5"); err != nil {
		t.Fatal(err)
	}
	var etag string
	var token int64
	if err := st.Pool.QueryRow(ctx, `SELECT etag, etag_token FROM fence WHERE resource = $1`, res).Scan(&etag, &token); err != nil {
		t.Fatal(err)
	}
	if etag != "e5" || token != 5 {
		t.Fatalf("fence row after the reset to 5 and a write of 5: etag %q, etag_token %d; want e5, 5", etag, token)
	}
}
