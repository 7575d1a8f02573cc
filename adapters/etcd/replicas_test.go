package etcd

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/sharedfence"
)

// The cluster view's reports: a report is put under P/v/ID and listed by
// name; a report silent for sharedfence.ReplicaForget is deleted by the next report
// of any replica, one silent for less is kept; ForgetReplica deletes one.
func TestReplicaReports(t *testing.T) {
	c := &testCluster{EtcdCluster: testenv.Etcd(t, 1), prefix: "/fg"}
	st := c.store(t)
	ctx := context.Background()
	cli := c.client(t)
	put := func(id, name string, seen time.Time) {
		ms := strconv.FormatInt(seen.UnixMilli(), 10)
		if _, err := cli.Put(ctx, "/fg/v/"+id, `{"n":"`+name+`","s":`+ms+`,"t":`+ms+`,"r":{}}`); err != nil {
			t.Fatal(err)
		}
	}
	put("old", "a-host", time.Now().Add(-sharedfence.ReplicaForget-time.Minute))
	put("down", "c-host", time.Now().Add(-time.Hour))
	started := time.Now().Add(-time.Second)
	if err := st.ReportReplica(ctx, "me", "b-host", started, []byte(`{"inflight_writes":1}`)); err != nil {
		t.Fatal(err)
	}
	rows, err := st.Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.ID+"="+r.Name)
	}
	if want := "[me=b-host down=c-host]"; fmt.Sprint(got) != want {
		t.Fatalf("replicas %s; want %s (old forgotten, by name)", fmt.Sprint(got), want)
	}
	if r := rows[0]; string(r.Report) != `{"inflight_writes":1}` || r.Started.UnixMilli() != started.UnixMilli() || r.Now.Sub(r.Seen) > 5*time.Second {
		t.Fatalf("own row %+v", r)
	}
	if resp, err := cli.Get(ctx, "/fg/v/old"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("a report silent past sharedfence.ReplicaForget is still in etcd: %v", err)
	}
	if err := st.ForgetReplica(ctx, "me"); err != nil {
		t.Fatal(err)
	}
	if resp, err := cli.Get(ctx, "/fg/v/me"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("forgotten report still in etcd: %v", err)
	}
	if err := st.ReportReplica(ctx, "x/y", "h", started, []byte(`{}`)); err == nil {
		t.Fatal("an id with a slash was reported")
	}
}
