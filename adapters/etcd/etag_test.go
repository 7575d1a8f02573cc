package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// storedETag reads resource's ETag key straight from etcd (the durable
// state): its record and whether it exists.
func (c *testCluster) storedETag(t *testing.T, resource string) (etagRecord, bool) {
	t.Helper()
	resp, err := c.client(t).Get(context.Background(), c.prefix+"/e/"+resource)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return etagRecord{}, false
	}
	r, err := decodeETag(resp.Kvs[0])
	if err != nil {
		t.Fatal(err)
	}
	return r, true
}

// The ETag bookkeeping of precondition routes on etcd: a record needs the
// fence record, an older token's record never replaces a newer one (also
// when they race from several processes), and a fence advance (which
// rewrites the fence record) leaves the ETag alone. Each answer is checked
// against the key in etcd.
func TestETagRecords(t *testing.T) {
	c := &testCluster{EtcdCluster: testenv.Etcd(t, 1), prefix: "/fg"}
	st := c.store(t)
	ctx := context.Background()
	const res = "bucket/obj"

	if err := st.RecordETag(ctx, res, 1, "e1"); !errors.Is(err, errNoFence) {
		t.Fatalf("record without a fence: %v; want errNoFence", err)
	}
	if _, ok := c.storedETag(t, res); ok {
		t.Fatal("a record was written without a fence")
	}
	if _, err := st.AdvanceFence(ctx, res, 2, "w"); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		token int64
		etag  string
		want  etagRecord
	}{
		{2, fencegate.ETagUnknown, etagRecord{fencegate.ETagUnknown, 2}}, // write-ahead mark
		{2, "e2", etagRecord{"e2", 2}},
		{1, "late", etagRecord{"e2", 2}}, // an older token's answer arriving late
		{2, "e2b", etagRecord{"e2b", 2}}, // the same token writes again
		{3, "", etagRecord{"", 3}},       // a delete
	} {
		if err := st.RecordETag(ctx, res, step.token, step.etag); err != nil {
			t.Fatalf("record %d %q: %v", step.token, step.etag, err)
		}
		if got, _ := c.storedETag(t, res); got != step.want {
			t.Fatalf("after record %d %q: etcd holds %+v; want %+v", step.token, step.etag, got, step.want)
		}
		if got, err := st.LastETag(ctx, res); err != nil || got != step.want.ETag {
			t.Fatalf("LastETag = %q, %v; want %q", got, err, step.want.ETag)
		}
	}
	if err := st.RecordETag(ctx, res, 3, "e3"); err != nil {
		t.Fatal(err)
	}
	// An advance rewrites the fence record; the ETag is kept.
	if _, err := st.AdvanceFence(ctx, res, 9, "w"); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.storedETag(t, res); got != (etagRecord{"e3", 3}) {
		t.Fatalf("after an advance: %+v; want e3 of token 3", got)
	}
	// The fence's state (fence show) carries the recorded ETag.
	if st, err := st.State(ctx, res); err != nil || st.Highest != 9 || st.ETag != "e3" {
		t.Fatalf("State = %+v, %v; want highest 9 with ETag e3", st, err)
	}
	if page, err := st.ListFences(ctx, "bucket/", "", 10); err != nil || len(page) != 1 || page[0].ETag != "e3" {
		t.Fatalf("ListFences = %+v, %v; want bucket/obj with ETag e3", page, err)
	}

	// A write's bookkeeping in one process: read, mark, record, one
	// request each (the revision guessed right).
	before := st.Requests()
	if _, err := st.LastETag(ctx, res); err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{fencegate.ETagUnknown, "e4"} {
		if err := st.RecordETag(ctx, res, 4, e); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.Requests() - before; n != 3 {
		t.Errorf("read, mark and record cost %d requests; want 3", n)
	}
	// Another process wrote meanwhile: the guess fails, the record is
	// read, an older token's answer is not recorded.
	if err := c.store(t).RecordETag(ctx, res, 6, "e6"); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordETag(ctx, res, 5, "e5"); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.storedETag(t, res); got != (etagRecord{"e6", 6}) {
		t.Fatalf("after token 5's late answer: %+v; want e6 of token 6", got)
	}

	// Racing records from four processes: the highest token's stays.
	const race = "bucket/race"
	if _, err := st.AdvanceFence(ctx, race, 1, "w"); err != nil {
		t.Fatal(err)
	}
	stores := []*Store{st, c.store(t), c.store(t), c.store(t)}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := int64(i%20 + 1)
			if err := stores[i%len(stores)].RecordETag(ctx, race, tok, fmt.Sprintf("v%d", tok)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got, _ := c.storedETag(t, race); got != (etagRecord{"v20", 20}) {
		t.Fatalf("after racing records: %+v; want v20 of token 20", got)
	}
}

// ForgetETagsBelow marks every record below the prefix unknown, its token
// raised to at least the given one, over more records than one Txn takes,
// and leaves the records beside the prefix alone.
func TestForgetETagsBelow(t *testing.T) {
	c := &testCluster{EtcdCluster: testenv.Etcd(t, 1), prefix: "/fg"}
	st := c.store(t)
	ctx := context.Background()
	n := forgetBatch*2 + 7
	var below []string
	for i := range n {
		below = append(below, fmt.Sprintf("b/dir/%04d", i))
	}
	others := []string{"b/dir", "b/dirt/x", "b/other"}
	for i, res := range append(append([]string{}, below...), others...) {
		tok := int64(1 + i%10)
		if _, err := st.AdvanceFence(ctx, res, tok, "w"); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordETag(ctx, res, tok, "e-"+res); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.ForgetETagsBelow(ctx, "b/dir/", 5); err != nil {
		t.Fatal(err)
	}
	for i, res := range below {
		want := etagRecord{fencegate.ETagUnknown, max(int64(1+i%10), 5)}
		if got, _ := c.storedETag(t, res); got != want {
			t.Fatalf("%s: %+v; want %+v", res, got, want)
		}
	}
	for i, res := range others {
		want := etagRecord{"e-" + res, int64(1 + (n+i)%10)}
		if got, _ := c.storedETag(t, res); got != want {
			t.Fatalf("%s (not below b/dir/): %+v; want %+v", res, got, want)
		}
	}
}

// The ETags travel through fence export and import on etcd: export reads
// them from the ETag keys (the fence record's own field is rewritten by
// every advance), import puts them in the Txn that raises the fence.
func TestExportImportETags(t *testing.T) {
	c := &testCluster{EtcdCluster: testenv.Etcd(t, 1), prefix: "/fg"}
	a := c.store(t)
	ctx := context.Background()
	if _, err := a.AdvanceFence(ctx, "b/x", 3, "w"); err != nil {
		t.Fatal(err)
	}
	if err := a.RecordETag(ctx, "b/x", 3, "ex"); err != nil {
		t.Fatal(err)
	}
	for res, tok := range map[string]int64{"b/x": 5, "b/y": 4} {
		if _, err := a.AdvanceFence(ctx, res, tok, "w"); err != nil {
			t.Fatal(err)
		}
	}
	var recs []fencegate.FenceRecord
	if err := a.ExportFences(ctx, func(r fencegate.FenceRecord) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(recs), "[{b/x 5 w ex} {b/y 4 w }]"; got != want {
		t.Fatalf("export %s; want %s", got, want)
	}
	b := &testCluster{EtcdCluster: c.EtcdCluster, prefix: "/fg2"}
	if n, err := b.store(t).ImportFences(ctx, recs); err != nil || n != 2 {
		t.Fatalf("import: %d, %v", n, err)
	}
	if got, _ := b.storedETag(t, "b/x"); got != (etagRecord{"ex", 5}) {
		t.Fatalf("imported etag record %+v; want ex of token 5", got)
	}
	if e, err := b.store(t).LastETag(ctx, "b/x"); err != nil || e != "ex" {
		t.Fatalf("LastETag after the import: %q, %v", e, err)
	}
}
