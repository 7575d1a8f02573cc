package bench

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// do sends one fenced PUT with token through h and wants status want.
func do(b *testing.B, h http.Handler, path, token string, want int) {
	req := httptest.NewRequest(http.MethodPut, path, strings.NewReader(`{"status":"shipped"}`))
	req.Header.Set("Fencing-Token", token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != want {
		b.Fatalf("PUT %s: %d %s", path, w.Code, w.Body)
	}
}
