package s3_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// recordingS3 answers 200 to everything and remembers what reached it.
type recordingS3 struct {
	mu   sync.Mutex
	seen []string
}

func (s *recordingS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	s.seen = append(s.seen, r.Method+" "+r.URL.RequestURI()+" rename-source="+r.Header.Get("X-Amz-Rename-Source"))
	s.mu.Unlock()
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.Header().Set("ETag", `"e"`)
}

// RenameObject (PUT /b/new?renameObject, X-Amz-Rename-Source: /b/old)
// removes the source object. The gateway fences only the path's object, so
// a zombie holding a token for any other key (a fresh one takes any token
// where tokens are not verified) would remove an object whose fence
// refuses it.
func TestReviewRenameObjectSourceUnfenced(t *testing.T) {
	rec := &recordingS3{}
	gw := reviewGateway(t, rec)
	if st := sendSigned(t, "PUT", gw+"/bucket/doc", "2", "B"); st != 200 {
		t.Fatalf("owner's write: %d", st)
	}
	status := sendSigned(t, http.MethodPut, gw+"/bucket/fresh?renameObject", "1", "",
		map[string]string{"X-Amz-Rename-Source": "/bucket/doc"})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, s := range rec.seen {
		if strings.Contains(s, "rename-source=/bucket/doc") {
			t.Fatalf("a RenameObject of bucket/doc (fenced at token 2) with token 1 was forwarded (%s; answered %d)", s, status)
		}
	}
	if status < 400 {
		t.Fatalf("RenameObject answered %d; want a refusal", status)
	}
}
