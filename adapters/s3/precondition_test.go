package s3_test

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/adapters/s3"
	"github.com/fencegate/fencegate/gateway"
)

// fakeS3 is one bucket of objects honouring If-Match (an entity-tag list or
// *) and If-None-Match: * on PutObject, as S3 does. A PUT whose body is
// hold waits, after its headers and body arrived, until release is closed:
// a request the gateway handed over and gave up on, landing late.
type fakeS3 struct {
	mu      sync.Mutex
	objects map[string]string // path -> body
	hold    string
	release chan struct{}
	applied chan string // bodies as they are applied
}

func etagOf(body string) string {
	s := md5.Sum([]byte(body))
	return `"` + hex.EncodeToString(s[:]) + `"`
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	body := string(b)
	if r.Method == http.MethodPut && body == f.hold {
		select {
		case <-f.release:
		case <-time.After(10 * time.Second):
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, exists := f.objects[r.URL.Path]
	switch r.Method {
	case http.MethodHead:
		if !exists {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("ETag", etagOf(cur))
	case http.MethodPut:
		if im := r.Header.Get("If-Match"); im != "" {
			ok := false
			for _, e := range strings.Split(im, ",") {
				e = strings.TrimSpace(e)
				ok = ok || (exists && (e == "*" || e == etagOf(cur)))
			}
			if !ok {
				w.WriteHeader(http.StatusPreconditionFailed)
				return
			}
		}
		if r.Header.Get("If-None-Match") == "*" && exists {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		f.objects[r.URL.Path] = body
		w.Header().Set("ETag", etagOf(body))
		if f.applied != nil {
			f.applied <- body
		}
	case http.MethodDelete:
		// As VersityGW routes it: every DELETE on an object that is not
		// ?tagging or ?uploadId is DeleteObject (?acl, ?retention, ...
		// included). A versionId other than "current" names an older
		// version: the current object stays.
		if im := r.Header.Get("If-Match"); im != "" && (!exists || (im != "*" && im != etagOf(cur))) {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		if v := r.URL.Query().Get("versionId"); v == "" || v == "current" {
			delete(f.objects, r.URL.Path)
		}
		w.WriteHeader(http.StatusNoContent)
		if f.applied != nil {
			f.applied <- "DELETE"
		}
	default:
		w.WriteHeader(http.StatusNotImplemented)
	}
}

// sendSigned sends a request signed with the worker's key, with the
// headers of hdr set before signing.
func sendSigned(t *testing.T, method, url, token, body string, hdr ...map[string]string) int {
	t.Helper()
	sum := sha256.Sum256([]byte(body))
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body == "" {
		req.Body = http.NoBody
	}
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	req.Header.Set("Fencing-Token", token)
	for _, h := range hdr {
		for k, v := range h {
			req.Header.Set(k, v)
		}
	}
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "worker", SecretAccessKey: "worker-secret"},
		req, hex.EncodeToString(sum[:]), "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func reviewGateway(t *testing.T, up http.Handler, opts ...func(*s3.Options)) string {
	t.Helper()
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	o := s3.Options{
		Spec: objectstore.Spec{Route: "objects", Resource: "{bucket}/{key}", Endpoint: srv.URL,
			Precondition: true, Versions: st, Logger: slog.New(slog.DiscardHandler)},
		AccessKeyID: "gw", SecretAccessKey: "gw-secret",
		Clients: []s3.Client{{AccessKeyID: "worker", SecretAccessKey: "worker-secret"}},
	}
	for _, opt := range opts {
		opt(&o)
	}
	u, err := s3.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	rt, err := gateway.NewRoute(gateway.RouteOptions{
		Name: "objects", Resource: "{bucket}/{key}",
		Vars:    func(n string) bool { return n == "bucket" || n == "key" },
		Timeout: 300 * time.Millisecond, DrainTimeout: 5 * time.Second,
	}, u)
	if err != nil {
		t.Fatal(err)
	}
	g.SetRoutes([]*gateway.Route{rt})
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	return gw.URL
}

// putSigned sends a PutObject signed with the worker's key.
func putSigned(t *testing.T, url, token, body string, hdr map[string]string) int {
	t.Helper()
	return sendSigned(t, http.MethodPut, url, token, body, hdr)
}

// A zombie's own If-Match: * (or If-None-Match on a version) must not take
// the place of the gateway's If-Match on the version it last wrote: "*" is
// satisfied by any version, the newer owner's included, so a request that
// the gateway handed to S3 and gave up on would overwrite the newer owner's
// object when it lands late; exactly the window precondition: etag closes.
func TestReviewWorkerWildcardIfMatchDisablesPrecondition(t *testing.T) {
	for _, hdr := range []map[string]string{
		{"If-Match": "*"},
		{"If-None-Match": `"0123456789abcdef0123456789abcdef"`},
	} {
		t.Run(strings.Join(func() []string {
			var s []string
			for k, v := range hdr {
				s = append(s, k+": "+v)
			}
			return s
		}(), ","), func(t *testing.T) {
			f := &fakeS3{objects: map[string]string{}, hold: "A-late", release: make(chan struct{}), applied: make(chan string, 8)}
			gw := reviewGateway(t, f)
			obj := gw + "/bucket/doc"
			if st := putSigned(t, obj, "1", "A-first", nil); st != 200 {
				t.Fatalf("A's first write: %d", st)
			}
			<-f.applied
			// A's second write reaches S3, which holds it; the gateway times out.
			if st := putSigned(t, obj, "1", "A-late", hdr); st != http.StatusGatewayTimeout {
				t.Fatalf("A's held write: %d; want 504 (the gateway gave up on it)", st)
			}
			// B, the new owner, writes.
			if st := putSigned(t, obj, "2", "B", nil); st != 200 {
				t.Fatalf("B's write: %d", st)
			}
			if got := <-f.applied; got != "B" {
				t.Fatalf("applied %q; want B", got)
			}
			// A's held request lands now.
			close(f.release)
			select {
			case got := <-f.applied:
				t.Fatalf("the late write of the old owner was applied (%q) over the new owner's object", got)
			case <-time.After(500 * time.Millisecond):
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if got := f.objects["/bucket/doc"]; got != "B" {
				t.Fatalf("object is %q; want B", got)
			}
		})
	}
}

// The gateway's classification of a write must not treat as "no effect on
// the object's ETag" a request the upstream applies as PutObject or
// DeleteObject. VersityGW (the store of this repository's e2e tests)
// routes PUT /b/k?torrent, ?select, ?attributes and ?restore to PutObject,
// and DELETE /b/k with any query but ?tagging and ?uploadId (?acl,
// ?retention, ?legal-hold, ...) to DeleteObject. Untracked, such a write
// leaves the record naming the replaced version, so the next owner's
// write is refused precondition_failed, and every one after it (the record
// is kept durably): one request locks the object against every later
// owner, and it went to S3 without the gateway's If-Match. None of these
// is an operation S3 defines: they are now refused before the fence.
func TestReviewSubresourceWriteUntracked(t *testing.T) {
	for _, tc := range []struct{ method, query, body string }{
		{"PUT", "torrent", "A-2"},
		{"PUT", "select", "A-2"},
		{"PUT", "attributes", "A-2"},
		{"PUT", "restore", "A-2"},
		{"DELETE", "acl", ""},
		{"DELETE", "retention", ""},
		{"DELETE", "legal-hold", ""},
		{"DELETE", "torrent", ""},
	} {
		t.Run(tc.method+"?"+tc.query, func(t *testing.T) {
			f := &fakeS3{objects: map[string]string{}}
			gw := reviewGateway(t, f)
			obj := gw + "/bucket/doc"
			if st := sendSigned(t, "PUT", obj, "1", "A-1"); st != 200 {
				t.Fatalf("A's first write: %d", st)
			}
			// Not an operation S3 defines with that query: refused
			// (checkWriteQuery), the object untouched.
			if st := sendSigned(t, tc.method, obj+"?"+tc.query, "1", tc.body); st != http.StatusNotImplemented {
				t.Fatalf("A's %s ?%s: %d; want 501", tc.method, tc.query, st)
			}
			f.mu.Lock()
			got := f.objects["/bucket/doc"]
			f.mu.Unlock()
			if got != "A-1" {
				t.Fatalf("object after the refused %s ?%s is %q; want A-1", tc.method, tc.query, got)
			}
			for i, tok := range []string{"2", "3"} {
				if st := sendSigned(t, "PUT", obj, tok, "B"); st != 200 {
					t.Fatalf("the new owner's write %d (token %s) after A's %s ?%s: %d; want 200", i+1, tok, tc.method, tc.query, st)
				}
			}
		})
	}
}

// DELETE ?versionId= removes one version, which need not be the current
// one: the object may stay. Recording it as deleted makes the gateway send
// If-None-Match: * on the next write, which S3 refuses (the object
// exists), and the refusal is kept durably: the owner's own routine
// cleanup of an old version locks the object for every later owner.
// (DeleteObjects entries with a <VersionId> are already re-learnt.)
func TestReviewVersionedDeleteRecordedAsDeleted(t *testing.T) {
	f := &fakeS3{objects: map[string]string{}}
	gw := reviewGateway(t, f)
	obj := gw + "/bucket/doc"
	if st := sendSigned(t, "PUT", obj, "1", "A-1"); st != 200 {
		t.Fatalf("first write: %d", st)
	}
	if st := sendSigned(t, "DELETE", obj+"?versionId=older", "1", ""); st != 204 {
		t.Fatalf("delete of an older version: %d", st)
	}
	for i, tok := range []string{"2", "3"} {
		if st := sendSigned(t, "PUT", obj, tok, "B"); st != 200 {
			t.Fatalf("write %d (token %s) after deleting an older version: %d; want 200", i+1, tok, st)
		}
	}
}
