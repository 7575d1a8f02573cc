package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate/console/consoletest"
	"github.com/fencegate/fencegate/internal/testenv"
)

func TestListFencesContract(t *testing.T) {
	pg := testenv.Postgres(t)
	st := openFenceStore(t, pg.URL, Options{MaxConns: 8})
	consoletest.RunFenceLister(t, st, func(t *testing.T, keys []string) {
		_, err := st.Pool.Exec(context.Background(),
			`INSERT INTO fence (resource, highest, owner) SELECT unnest($1::text[]), 1, 'seed'`, keys)
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestListLeases(t *testing.T) {
	pg := testenv.Postgres(t)
	st := openFenceStore(t, pg.URL, Options{MaxConns: 4})
	ls := NewLeases(st)
	ctx := context.Background()
	for i := range 5 {
		if _, _, err := ls.Acquire(ctx, fmt.Sprintf("/jobs/%d", i), fmt.Sprintf("w%d", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := ls.Lease(ctx, "/jobs/1")
	if _, err := ls.Release(ctx, "/jobs/1", "w1", l.Token); err != nil {
		t.Fatal(err)
	}
	page, err := ls.ListLeases(ctx, "/jobs/", "", 3)
	if err != nil || len(page) != 3 {
		t.Fatalf("first page = %v, %v; want 3 leases", page, err)
	}
	rest, err := ls.ListLeases(ctx, "/jobs/", page[2].Resource, 3)
	if err != nil || len(rest) != 2 || rest[1].Resource != "/jobs/4" {
		t.Fatalf("second page = %v, %v; want /jobs/3 and /jobs/4", rest, err)
	}
	if page[1].Resource != "/jobs/1" || page[1].Held() || page[0].Owner != "w0" || !page[0].Held() || page[0].Remaining <= 0 {
		t.Errorf("leases = %+v; want /jobs/0 held by w0 and /jobs/1 released", page)
	}
}
