package bolt

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/console/consoletest"
	bbolt "go.etcd.io/bbolt"
)

func TestListFencesContract(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "fences.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	consoletest.RunFenceLister(t, st, func(t *testing.T, keys []string) {
		err := st.db.Update(func(tx *bbolt.Tx) error {
			for _, k := range keys {
				if err := putFence(tx, st.known, k, fenceRecord{Highest: 1, Owner: "seed", UpdatedAt: time.Now().UTC()}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestListLeases(t *testing.T) {
	ls := openLeases(t, filepath.Join(t.TempDir(), "leases.db"))
	ctx := context.Background()
	for i := range 5 {
		if _, _, err := ls.Acquire(ctx, fmt.Sprintf("/jobs/%d", i), fmt.Sprintf("w%d", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := ls.Acquire(ctx, "/other", "x", time.Minute); err != nil {
		t.Fatal(err)
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
	if page[1].Resource != "/jobs/1" || page[1].Held() || page[0].Owner != "w0" || !page[0].Held() {
		t.Errorf("leases = %+v; want /jobs/0 held by w0 and /jobs/1 released", page)
	}
}
