package upstreamconn

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// connTracker is an upstream handler's record of the client address each
// request path came from, and whether it asked to close.
type connTracker struct {
	mu    sync.Mutex
	from  map[string]string
	close map[string]bool
}

func (ct *connTracker) note(r *http.Request) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.from == nil {
		ct.from, ct.close = map[string]string{}, map[string]bool{}
	}
	ct.from[r.URL.Path], ct.close[r.URL.Path] = r.RemoteAddr, r.Close
}

func (ct *connTracker) sameConn(a, b string) bool {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return ct.from[a] == ct.from[b]
}

// With KeepBodies, a connection that carried a body is kept after a 2xx
// only: a refusal is what servers send from the head alone, so nothing
// proves the body was read, even where (as here) it was. Requests without
// a body keep their connections whatever the status.
func TestTransportKeepBodiesOnly2xx(t *testing.T) {
	var ct connTracker
	srv, _ := leanServer(t, func(w http.ResponseWriter, r *http.Request) {
		ct.note(r)
		io.Copy(io.Discard, r.Body)
		var st int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path[1:], "s"), &st)
		if st >= 300 && st < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(st)
	})
	tr := newTransport()
	tr.KeepBodies = true
	defer tr.CloseIdleConnections()
	for _, tc := range []struct {
		status int
		body   bool
		kept   bool
	}{
		{200, true, true}, {201, true, true}, {204, true, true},
		{302, true, false}, {304, true, false}, {401, true, false}, {403, true, false},
		{404, true, false}, {412, true, false}, {500, true, false},
		{404, false, true}, {304, false, true},
	} {
		t.Run(fmt.Sprintf("%d body=%v", tc.status, tc.body), func(t *testing.T) {
			path := fmt.Sprintf("/s%d-%v", tc.status, tc.body)
			var body io.Reader
			if tc.body {
				body = strings.NewReader("payload")
			}
			req, _ := http.NewRequest("PUT", srv.URL+path, body)
			if st, _ := do(t, tr, req); st != tc.status {
				t.Fatalf("status %d", st)
			}
			next := "/s200-after" + path
			req, _ = http.NewRequest("GET", srv.URL+next, nil)
			if st, _ := do(t, tr, req); st != 200 {
				t.Fatalf("next: status %d", st)
			}
			if kept := ct.sameConn(path, next); kept != tc.kept {
				t.Fatalf("the next request came on the same connection: %v; want %v", kept, tc.kept)
			}
			tr.CloseIdleConnections()
		})
	}
}

// With KeepBodies, a connection whose answer began before the body was
// sent whole is not kept, even after a 2xx and with the body then read:
// the upstream answered without waiting for the body. The body here is
// inline (small enough to be written before the answer is read) and held
// back after its first part until the answer has been sent.
func TestTransportKeepBodiesAnswerBeforeBody(t *testing.T) {
	var ct connTracker
	answered := make(chan struct{}, 1)
	srv, _ := leanServer(t, func(w http.ResponseWriter, r *http.Request) {
		ct.note(r)
		if r.URL.Path == "/early" {
			http.NewResponseController(w).EnableFullDuplex()
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusCreated)
			http.NewResponseController(w).Flush()
			answered <- struct{}{}
		}
		io.Copy(io.Discard, r.Body)
	})
	tr := newTransport()
	tr.KeepBodies = true
	defer tr.CloseIdleConnections()
	first := strings.Repeat("a", 2*ConnBufferSize) // flushes the head
	body := io.MultiReader(strings.NewReader(first), readerFunc(func(p []byte) (int, error) {
		select {
		case <-answered:
		case <-time.After(10 * time.Second):
		}
		time.Sleep(50 * time.Millisecond) // the answer's bytes reach the gateway's socket
		return 0, io.EOF
	}), strings.NewReader("tail"))
	req, _ := http.NewRequest("PUT", srv.URL+"/early", body)
	req.ContentLength = int64(len(first) + len("tail"))
	if st, _ := do(t, tr, req); st != http.StatusCreated {
		t.Fatalf("status %d", st)
	}
	req, _ = http.NewRequest("GET", srv.URL+"/after", nil)
	if st, _ := do(t, tr, req); st != 200 {
		t.Fatalf("after: status %d", st)
	}
	if ct.sameConn("/early", "/after") {
		t.Fatal("the request after an answer that began before its body was sent came on the same connection")
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// With CloseShortcuts, a write carrying a precondition or an Expect goes
// with Connection: close even where KeepBodies keeps the others: an
// upstream that answers it from the head (304, 412) would take the body
// for its next request at once. Without CloseShortcuts it is kept.
func TestTransportCloseShortcuts(t *testing.T) {
	var ct connTracker
	srv, _ := leanServer(t, func(w http.ResponseWriter, r *http.Request) {
		ct.note(r)
		io.Copy(io.Discard, r.Body)
	})
	for _, shortcuts := range []bool{false, true} {
		tr := newTransport()
		tr.KeepBodies, tr.CloseShortcuts = true, shortcuts
		for _, tc := range []struct{ name, field, value string }{
			{"plain", "", ""},
			{"if-none-match", "If-None-Match", `"abc"`},
			{"if-match", "If-Match", `"abc"`},
			{"if-unmodified-since", "If-Unmodified-Since", "Sun, 06 Dec 2026 00:00:00 GMT"},
			{"webdav-if", "If", "(<urn:x>)"},
			{"lower-case", "if-match", `"abc"`},
			{"expect", "Expect", "100-continue"},
		} {
			path := fmt.Sprintf("/%s-%v", tc.name, shortcuts)
			req, _ := http.NewRequest("PUT", srv.URL+path, strings.NewReader("payload"))
			if tc.field != "" {
				req.Header[tc.field] = []string{tc.value} // as given: lower case too
			}
			if st, _ := do(t, tr, req); st != 200 {
				t.Fatalf("%s: status %d", path, st)
			}
			ct.mu.Lock()
			closed := ct.close[path]
			ct.mu.Unlock()
			if want := shortcuts && tc.field != ""; closed != want {
				t.Errorf("%s: Connection: close %v, want %v", path, closed, want)
			}
		}
		tr.CloseIdleConnections()
	}
}

// With CloseShortcuts, a write handed to net/http's client over HTTP/1.1
// (an https upstream without HTTP/2) goes with Connection: close: that
// client keeps a connection after any answer, so the checks KeepBodies
// makes are not made there. Without CloseShortcuts it is kept.
func TestTransportCloseShortcutsStd(t *testing.T) {
	var ct connTracker
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct.note(r)
		io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(srv.Close)
	for _, shortcuts := range []bool{false, true} {
		std := srv.Client().Transport.(*http.Transport).Clone()
		std.ForceAttemptHTTP2 = false
		tr := NewTransport(std)
		tr.KeepBodies, tr.CloseShortcuts = true, shortcuts
		path := fmt.Sprintf("/https-%v", shortcuts)
		req, _ := http.NewRequest("PUT", srv.URL+path, strings.NewReader("payload"))
		if st, _ := do(t, tr, req); st != 200 {
			t.Fatalf("%s: status %d", path, st)
		}
		ct.mu.Lock()
		closed := ct.close[path]
		ct.mu.Unlock()
		if closed != shortcuts {
			t.Errorf("%s: Connection: close %v, want %v", path, closed, shortcuts)
		}
		tr.CloseIdleConnections()
	}
}

// Spelling records the names an answer spelled otherwise than their
// canonical form, every line of such a name in order, and nothing for an
// answer spelled canonically.
func TestSpellingLearn(t *testing.T) {
	for _, tc := range []struct {
		head string
		want map[string][]string
	}{
		{"HTTP/1.1 200 OK\r\nContent-Type: a\r\nX-Amz-Meta-Key: b\r\nEtag: c\r\n\r\n", nil},
		{"HTTP/1.1 200 OK\r\nx-amz-meta-Key: b\r\nContent-Type: a\r\nX-Amz-Meta-Key: c\r\n\r\n",
			map[string][]string{"X-Amz-Meta-Key": {"x-amz-meta-Key", "X-Amz-Meta-Key"}}},
		{"HTTP/1.1 200 OK\r\nETag: c\r\n folded\r\nbad name: x\r\n\r\nlower: after the head\r\n", map[string][]string{"Etag": {"ETag"}}},
		{"HTTP/1.1 200 OK\nx-ms-meta-a: 1\n\n", map[string][]string{"X-Ms-Meta-A": {"x-ms-meta-a"}}},
	} {
		var s Spelling
		s.learn([]byte(tc.head))
		if !reflect.DeepEqual(s.names, tc.want) {
			t.Errorf("%q: %v; want %v", tc.head, s.names, tc.want)
		}
	}
}

// An answer spelled canonically, most answers, is read for its spelling
// without an allocation.
func TestSpellingLearnAllocates(t *testing.T) {
	head := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nEtag: \"1\"\r\nX-Guploader-Uploadid: x\r\nContent-Length: 843\r\n\r\n")
	var s Spelling
	if n := testing.AllocsPerRun(100, func() { s.learn(head) }); n != 0 {
		t.Fatalf("%v allocations per canonical answer; want none", n)
	}
}
