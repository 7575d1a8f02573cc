package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
)

// memStore is a fourth object store: objects by "bucket/name", each with
// a version and a stamp, written conditionally (If-Match, If-None-Match:
// *), listed as JSON with their stamps.
type memStore struct {
	mu      sync.Mutex
	objects map[string]memObject
	version int
	writes  int // conditional writes the store took
}

type memObject struct {
	ETag  string `json:"etag"`
	Stamp string `json:"stamp,omitempty"`
}

func (m *memStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name := strings.TrimPrefix(r.URL.Path, "/")
	o, exists := m.objects[name]
	switch r.Method {
	case http.MethodGet:
		if r.URL.Query().Has("list") {
			out := map[string]memObject{}
			for k, v := range m.objects {
				if strings.HasPrefix(k, name+"/"+r.URL.Query().Get("prefix")) {
					out[strings.TrimPrefix(k, name+"/")] = v
				}
			}
			json.NewEncoder(w).Encode(out)
			return
		}
		if !exists {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("ETag", o.ETag)
	case http.MethodPut:
		io.Copy(io.Discard, r.Body)
		if im := r.Header.Get("If-Match"); im != "" && (!exists || im != o.ETag) || r.Header.Get("If-None-Match") == "*" && exists {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		m.writes++
		m.version++
		o = memObject{ETag: fmt.Sprintf(`"v%d"`, m.version), Stamp: r.Header.Get("Stamp")}
		m.objects[name] = o
		w.Header().Set("ETag", o.ETag)
	case http.MethodDelete:
		delete(m.objects, name)
	}
}

// memUpstream is the fourth dialect's upstream: what the registry asks of
// any dialect (its forwarding is not what this test is about).
type memUpstream struct {
	base string
}

func (u *memUpstream) Forward(w http.ResponseWriter, r *http.Request, req *gateway.Request) error {
	return nil
}

func (u *memUpstream) ObjectVars(bucket, name string) map[string]string {
	return objectstore.Vars("bucket", bucket, "key", name)
}

func (u *memUpstream) do(ctx context.Context, method, path string, h http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.base+"/"+path, strings.NewReader("probe"))
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	return http.DefaultClient.Do(req)
}

func (u *memUpstream) ProbeRace(ctx context.Context, bucket string, n int) error {
	return objectstore.ProbeRace(ctx, "bucket", bucket, memProbe{u, bucket + "/.probe"}, n)
}

type memProbe struct {
	u    *memUpstream
	name string
}

func (p memProbe) Put(ctx context.Context, body, ifMatch string) (int, string, error) {
	h := http.Header{"If-None-Match": {"*"}}
	if ifMatch != "" {
		h = http.Header{"If-Match": {ifMatch}}
	}
	resp, err := p.u.do(ctx, http.MethodPut, p.name, h)
	if err != nil {
		return 0, "", err
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("ETag"), nil
}

func (p memProbe) Head(ctx context.Context) (string, error) {
	resp, err := p.u.do(ctx, http.MethodGet, p.name, nil)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	return objectstore.HeadVersion(resp, p.name, "ETag")
}

func (p memProbe) Delete(ctx context.Context) {
	if resp, err := p.u.do(ctx, http.MethodDelete, p.name, nil); err == nil {
		resp.Body.Close()
	}
}

func (u *memUpstream) ScanStamps(ctx context.Context, bucket, prefix string, fn func(objectstore.Stamp) error) (int, error) {
	resp, err := u.do(ctx, http.MethodGet, bucket+"?list&prefix="+prefix, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var list map[string]memObject
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, err
	}
	scan := &objectstore.StampScan{Collection: bucket, Key: "Stamp", Fn: fn}
	for name, o := range list {
		if err := scan.Object(name, o.Stamp, o.Stamp != ""); err != nil {
			return scan.Unstamped, err
		}
	}
	return scan.Unstamped, nil
}

// versionStore records versions, as the fence stores do.
type versionStore struct{ gateway.Store }

func (versionStore) LastETag(context.Context, string) (string, error)        { return "", nil }
func (versionStore) RecordETag(context.Context, string, int64, string) error { return nil }

// TestFourthDialectIsOneEntry: a dialect the server has never heard of,
// given as one registry entry (here in place of the s3 section's, whose
// configuration it reads), is built into a route with its start probe,
// probed by the doctor and scanned by the rebuild, with nothing else of
// the server knowing it: the probes and the scan reach the store itself.
func TestFourthDialectIsOneEntry(t *testing.T) {
	store := &memStore{objects: map[string]memObject{
		"b/stamped": {ETag: `"v0"`, Stamp: "41"},
		"b/plain":   {ETag: `"v0"`},
	}}
	srv := httptest.NewServer(store)
	defer srv.Close()
	var opened []storeOptions
	saved := objectStores["s3"]
	t.Cleanup(func() { objectStores["s3"] = saved })
	objectStores["s3"] = ObjectStore{
		name:      "Mem",
		transport: func() http.RoundTripper { return http.DefaultTransport },
		open: func(_ context.Context, rc config.Route, o storeOptions) (storeUpstream, error) {
			opened = append(opened, o)
			return &memUpstream{base: rc.S3.Endpoint}, nil
		},
		Where:   "--bucket",
		honours: "If-Match on PUT",
	}
	rc := config.Route{Name: "mem", Resource: "{bucket}/{key}", Precondition: "etag",
		S3: &config.S3{Endpoint: srv.URL, CheckBucket: "b", Stamp: true}}
	cfg := &config.Config{Gateway: &config.Gateway{Routes: []config.Route{rc}}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	if _, err := BuildRoutes(cfg, log, versionStore{}); err != nil {
		t.Fatal(err)
	}
	if len(opened) != 1 || !opened[0].Forwards || opened[0].Versions == nil {
		t.Fatalf("serving route opened with %+v; want forwarding with a version store", opened)
	}
	// The start probe raced conditional writes on the store and removed
	// its object.
	if store.writes < 2 {
		t.Fatalf("store took %d conditional writes at start; want the racing probe's", store.writes)
	}
	if _, ok := store.objects["b/.probe"]; ok {
		t.Fatal("the probe object is left in the store")
	}

	dia, ok := ObjectStoreOf(rc)
	if !ok {
		t.Fatal("no dialect for the route")
	}
	where, _ := dia.CheckWhere(rc, "")
	before := store.writes
	fs := dia.Doctor(context.Background(), rc, where)
	if len(fs) != 1 || fs[0].Failed() || !strings.Contains(fs[0].Text, "honours If-Match on PUT, racing writes included (bucket b)") {
		t.Fatalf("doctor found %+v", fs)
	}
	if store.writes == before {
		t.Fatal("the doctor's probe did not reach the store")
	}
	if o := opened[len(opened)-1]; o.Forwards || o.Versions != nil {
		t.Fatalf("doctor opened the upstream with %+v; want no forwarding, no precondition", o)
	}

	sc, err := dia.Scanner(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}
	var got []objectstore.Stamp
	unstamped, err := sc.Scan(context.Background(), "b", "", func(s objectstore.Stamp) error { got = append(got, s); return nil })
	if err != nil || !sc.Stamps || unstamped != 1 || len(got) != 1 || got[0] != (objectstore.Stamp{Collection: "b", Object: "stamped", Token: 41}) {
		t.Fatalf("scan: %v, stamps %v, unstamped %d, %+v", err, sc.Stamps, unstamped, got)
	}
	if v := sc.Vars("b", "stamped"); v["key"] != "stamped" {
		t.Fatalf("vars %v", v)
	}
}

var _ precondition.Store = versionStore{}

// The stores that commands' help and messages name come from the
// registry, in the order of config's sections, and every registered
// dialect is named.
func TestObjectStoreNames(t *testing.T) {
	for _, tc := range []struct{ conj, where, want string }{
		{"or", "", "S3, GCS or Azure"},
		{"and", "", "S3, GCS and Azure"},
		{"or", "--bucket", "S3 or GCS"},
		{"or", "--container", "Azure"},
		{"or", "--nowhere", ""},
	} {
		if got := ObjectStoreNames(tc.conj, tc.where); got != tc.want {
			t.Errorf("ObjectStoreNames(%q, %q) = %q; want %q", tc.conj, tc.where, got, tc.want)
		}
	}
	all := ObjectStoreNames("or", "")
	for _, kind := range config.ObjectStoreKinds() {
		o, ok := objectStores[kind]
		if !ok || !strings.Contains(all, o.name) {
			t.Errorf("section %s: registered %v, named in %q", kind, ok, all)
		}
	}
}
