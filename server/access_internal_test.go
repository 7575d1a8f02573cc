package server

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestAccessLogAbortedRequest: a request whose handler aborts the
// connection (the gateway does, http.ErrAbortHandler, when no answer may be
// given) still gets its access line, with status 0 rather than the 200
// net/http would have implied; a normal request gets its status.
func TestAccessLogAbortedRequest(t *testing.T) {
	logs := &testenv.LogBuffer{}
	s := &Server{cfg: &config.Config{Log: config.Log{Access: true}}, log: slog.New(slog.NewJSONHandler(logs, nil))}
	h := s.accessLog("gateway", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	if resp, err := http.Get(srv.URL + "/abort"); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t.Fatalf("aborted request answered %d; want the connection closed", resp.StatusCode)
	}
	resp, err := http.Get(srv.URL + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	out := logs.String()
	for _, want := range []string{`"path":"/abort","route":"","status":0`, `"path":"/ok","route":"","status":201`} {
		if !strings.Contains(out, want) {
			t.Errorf("access log lacks %s:\n%s", want, out)
		}
	}
}
