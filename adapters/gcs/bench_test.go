package gcs

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/internal/testenv"
)

// fastStore answers every request at once, as the store answers an
// upload: 200 with the object resource, the body read.
type fastStore struct{}

func (fastStore) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	const doc = `{"kind":"storage#object","bucket":"bk","name":"obj","generation":"1733500000000001","metageneration":"1","size":"4096"}`
	return &http.Response{
		StatusCode: http.StatusOK, ProtoMajor: 1, ProtoMinor: 1, Request: req,
		Header:        http.Header{"Content-Type": {"application/json"}, "Date": {"Sun, 06 Dec 2026 19:00:00 GMT"}},
		Body:          io.NopCloser(strings.NewReader(doc)),
		ContentLength: int64(len(doc)),
	}, nil
}

// BenchmarkGatewayUpload is the gateway's own work on a 4 KiB upload as
// cloud.google.com/go/storage sends it (one multipart/related request of
// unknown length: the object resource, then the media), stamped, through
// gateway.ServeHTTP with the GCS adapter in front of a store that answers
// at once: no sockets, no HTTP parsing of the worker's request.
//
//	go test ./adapters/gcs -run '^$' -bench GatewayUpload -benchmem -cpuprofile /tmp/gcs.cpu
func BenchmarkGatewayUpload(b *testing.B) {
	u, err := New(Options{Spec: objectstore.Spec{Route: "r", Endpoint: "http://127.0.0.1:4443", Resource: "{bucket}/{object}",
		Stamp: true, Transport: fastStore{}}})
	if err != nil {
		b.Fatal(err)
	}
	g := throughGateway(b, u)
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	p, _ := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {"application/json"}})
	p.Write([]byte(`{"bucket":"bk","name":"obj"}` + "\n"))
	p, _ = mw.CreatePart(textproto.MIMEHeader{"Content-Type": {"text/plain; charset=utf-8"}})
	p.Write(bytes.Repeat([]byte("x"), 4<<10))
	mw.Close()
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080/upload/storage/v1/b/bk/o?alt=json&name=obj&prettyPrint=false&projection=full&uploadType=multipart", nil)
	req.Header.Set("Content-Type", "multipart/related; boundary="+mw.Boundary())
	req.Header.Set("User-Agent", "gcloud-golang-storage/1.50.0")
	req.Header.Set("X-Goog-Api-Client", "gl-go/1.26.8 gccl/1.50.0 gccl-invocation-id/1 gccl-attempt-count/1")
	req.Header.Set("Fencing-Token", "1")
	req.ContentLength, req.TransferEncoding = -1, []string{"chunked"}
	rd := bytes.NewReader(body.Bytes())
	b.ReportAllocs()
	cpu0 := testenv.ProcCPU(b, os.Getpid())
	for b.Loop() {
		r := *req
		r.Header = r.Header.Clone()
		rd.Reset(body.Bytes())
		r.Body = io.NopCloser(rd)
		w := httptest.NewRecorder() // a few of the allocations
		g.ServeHTTP(w, &r)
		if w.Code != http.StatusOK {
			b.Fatalf("answer %d: %s", w.Code, w.Body)
		}
	}
	// CPU time per request (this process, GC included): wall time is only
	// a figure on an otherwise idle machine.
	b.ReportMetric(float64(testenv.ProcCPU(b, os.Getpid())-cpu0)/float64(b.N), "cpu-ns/op")
}
