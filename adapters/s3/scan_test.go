package s3_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/adapters/s3"
)

// `fence rebuild` reads the stamps under the route's stamp_header whether
// stamping is on or off: a route that stamped under its own header and
// then turned stamping off still rebuilds from what it wrote.
func TestScanStampsReadsConfiguredHeader(t *testing.T) {
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2":
			w.Header().Set("Content-Type", "application/xml")
			w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name><KeyCount>1</KeyCount><IsTruncated>false</IsTruncated><Contents><Key>k</Key><Size>1</Size></Contents></ListBucketResult>`))
		case r.Method == http.MethodHead && r.URL.Path == "/b/k":
			w.Header().Set("X-Amz-Meta-Fencing-Token", "7")
			w.Header().Set("X-Amz-Meta-Owner-Token", "42")
		default:
			http.Error(w, "unexpected", http.StatusBadRequest)
		}
	}))
	t.Cleanup(store.Close)
	for _, c := range []struct {
		name  string
		stamp bool
		key   string
		want  int64
	}{
		{"stamping on, own header", true, "x-amz-meta-owner-token", 42},
		{"stamping off, own header", false, "x-amz-meta-owner-token", 42},
		{"stamping off, default header", false, "", 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, err := s3.New(context.Background(), s3.Options{
				Spec:        objectstore.Spec{Route: "objects", Resource: "{bucket}/{key}", Endpoint: store.URL, Stamp: c.stamp, StampKey: c.key},
				AccessKeyID: "gw", SecretAccessKey: "gw-secret",
				Clients: []s3.Client{{AccessKeyID: "worker", SecretAccessKey: "worker-secret"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			var got []objectstore.Stamp
			unstamped, err := u.ScanStamps(context.Background(), "b", "", func(s objectstore.Stamp) error { got = append(got, s); return nil })
			if err != nil || unstamped != 0 || len(got) != 1 || got[0].Token != c.want {
				t.Fatalf("scan: %+v, %d unstamped, %v; want one stamp of %d", got, unstamped, err, c.want)
			}
		})
	}
}
