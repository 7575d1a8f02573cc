package e2e

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// condS3 is an S3 test double that checks every condition atomically (one
// lock around check and write) on PutObject, and on DeleteObject, the
// <ETag> of DeleteObjects entries and the CopyObject destination only if
// honour is set; without it it ignores those three, as many stores do.
// It verifies the body checksums aws-sdk-go-v2 sends on DeleteObjects
// (x-amz-checksum-crc32, Content-MD5), so a body the gateway rewrites must
// carry recomputed ones. It does not verify signatures.
type condS3 struct {
	*httptest.Server
	mu      sync.Mutex
	objects map[string]string // path -> body
	// deletes counts DeleteObjects bodies that carried an <ETag>.
	etagEntries int
}

func newCondS3(t *testing.T, honour bool) *condS3 {
	s := &condS3{objects: map[string]string{}}
	etagOf := func(b string) string {
		sum := md5.Sum([]byte(b))
		return hex.EncodeToString(sum[:])
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		defer s.mu.Unlock()
		cur, exists := s.objects[r.URL.Path]
		im, inm := r.Header.Get("If-Match"), r.Header.Get("If-None-Match")
		failed := (inm == "*" && exists) || (im != "" && (!exists || im != `"`+etagOf(cur)+`"`))
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/"+s3Bucket:
			// CreateBucket: nothing to do.
		case r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "":
			if honour && failed {
				w.WriteHeader(http.StatusPreconditionFailed)
				return
			}
			src, _ := url.PathUnescape(r.Header.Get("X-Amz-Copy-Source"))
			b, ok := s.objects["/"+strings.TrimPrefix(src, "/")]
			if !ok {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			s.objects[r.URL.Path] = b
			fmt.Fprintf(w, `<CopyObjectResult><ETag>"%s"</ETag></CopyObjectResult>`, etagOf(b))
		case r.Method == http.MethodPut:
			if failed {
				w.WriteHeader(http.StatusPreconditionFailed)
				return
			}
			s.objects[r.URL.Path] = string(body)
			w.Header().Set("ETag", `"`+etagOf(string(body))+`"`)
		case r.Method == http.MethodDelete:
			if honour && im != "" && exists && im != `"`+etagOf(cur)+`"` {
				w.WriteHeader(http.StatusPreconditionFailed)
				return
			}
			delete(s.objects, r.URL.Path)
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodPost && r.URL.Query().Has("delete"):
			if c := r.Header.Get("X-Amz-Checksum-Crc32"); c != "" && c != base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE(body))) {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `<Error><Code>BadDigest</Code><Message>crc32</Message></Error>`)
				return
			}
			if c := r.Header.Get("Content-Md5"); c != "" {
				sum := md5.Sum(body)
				if c != base64.StdEncoding.EncodeToString(sum[:]) {
					w.WriteHeader(http.StatusBadRequest)
					io.WriteString(w, `<Error><Code>BadDigest</Code><Message>md5</Message></Error>`)
					return
				}
			}
			var d struct {
				Objects []struct {
					Key  string `xml:"Key"`
					ETag string `xml:"ETag"`
				} `xml:"Object"`
			}
			if err := xml.Unmarshal(body, &d); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			var out strings.Builder
			out.WriteString("<DeleteResult>")
			for _, o := range d.Objects {
				p := r.URL.Path + "/" + o.Key
				b, ok := s.objects[p]
				if o.ETag != "" {
					s.etagEntries++
				}
				if honour && o.ETag != "" && ok && o.ETag != `"`+etagOf(b)+`"` {
					fmt.Fprintf(&out, "<Error><Key>%s</Key><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>", o.Key)
					continue
				}
				delete(s.objects, p)
				fmt.Fprintf(&out, "<Deleted><Key>%s</Key></Deleted>", o.Key)
			}
			out.WriteString("</DeleteResult>")
			io.WriteString(w, out.String())
		case r.Method == http.MethodHead || r.Method == http.MethodGet:
			if !exists {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.Header().Set("ETag", `"`+etagOf(cur)+`"`)
			io.WriteString(w, cur)
		default:
			w.WriteHeader(http.StatusNotImplemented)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *condS3) body(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objects["/"+s3Bucket+"/"+key]
	if !ok {
		return "<absent>"
	}
	return b
}

// The delete and copy probe of `fencegate doctor`: against VersityGW it
// prints what the store honours (measured, docs/s3.md); against a store
// that ignores those conditions it names each one and says it is forwarded
// unconditioned, exit 0 (PutObject conditions hold); against one that
// honours them, all ok.
func TestS3ConditionsProbe(t *testing.T) {
	srv := testenv.Versity(t)
	srv.CreateBucket(t, s3Bucket)
	ign, hon := newCondS3(t, false), newCondS3(t, true)
	for _, tc := range []struct {
		name, endpoint string
		want           []string
	}{
		{"versitygw", srv.Endpoint, versityConditions},
		{"ignores", ign.URL, []string{
			"route objects: note: DeleteObject If-Match not honoured (a DeleteObject with If-Match on a wrong ETag deleted the object (answered 204): the condition is ignored): the gateway forwards it unconditioned",
			"route objects: note: DeleteObjects <ETag> not honoured (a DeleteObjects entry with a wrong <ETag> deleted its object: the condition is ignored)",
			"route objects: note: CopyObject destination If-Match/If-None-Match not honoured (a CopyObject with If-Match on the source's ETag (not the destination's) answered 200, want 412 and replaced the destination: the condition is ignored, or applied to the source)",
		}},
		{"honours", hon.URL, []string{
			"route objects: ok: DeleteObject If-Match honoured",
			"route objects: ok: DeleteObjects <ETag> honoured",
			"route objects: ok: CopyObject destination If-Match/If-None-Match honoured",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runDoctor(t, s3GatewayYAML(s3RouteYAML("objects", "", tc.endpoint, srv, "etag", "5s")), "-bucket", s3Bucket)
			if code != 0 {
				t.Fatalf("doctor exit %d; want 0:\n%s", code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("doctor output lacks %q:\n%s", w, out)
				}
			}
			t.Logf("doctor:\n%s", out)
		})
	}
}

// versityConditions is what the probe measures on VersityGW (the pinned
// version in tools/go.mod), as documented in docs/s3.md.
var versityConditions = []string{
	"route objects: ok: DeleteObject If-Match honoured",
	"route objects: note: DeleteObjects <ETag> not honoured (a DeleteObjects entry with a wrong <ETag> deleted its object: the condition is ignored)",
	"route objects: note: CopyObject destination If-Match/If-None-Match not honoured (a CopyObject with If-Match on the source's ETag (not the destination's) answered 200, want 412 and replaced the destination",
}

var _ = aws.String
var _ = s3.New
var _ = types.ObjectIdentifier{}
var _ = awsfence.Fixed
var _ = context.Background
var _ = time.Second
