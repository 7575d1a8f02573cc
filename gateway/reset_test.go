package gateway_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// TestResetRefusedWhileWritesInFlight: the admin API refuses to lower a
// fence while a write of it is in flight, 409 fence_draining with
// Retry-After (a refused reset is 409, whatever the reason), and the
// durable record keeps its token; once the write ends the reset lowers it.
func TestResetRefusedWhileWritesInFlight(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	f := gateway.NewLocalFence(st, gateway.LocalFenceOptions{})
	api := &gateway.FenceAPI{Fence: f, Log: slog.New(slog.DiscardHandler), Reset: func(ctx context.Context, res string, to int64, owner string) (fencegate.FenceState, error) {
		return f.Lower(ctx, res, func(ctx context.Context) (fencegate.FenceState, error) { return st.ResetFence(ctx, res, to, owner) })
	}}
	mux := http.NewServeMux()
	api.Register(mux)
	reset := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("POST", "/v1/fences/reset", strings.NewReader(`{"resource":"/r","to":2,"confirm":"/r"}`)))
		return w
	}

	p, err := f.Admit(ctx, gateway.Write{Resource: "/r", Token: 7})
	if err != nil {
		t.Fatal(err)
	}
	w := reset()
	var body fencegate.Error
	json.Unmarshal(w.Body.Bytes(), &body)
	if w.Code != http.StatusConflict || body.Code != fencegate.CodeFenceDraining || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("reset with a write in flight: %d %v %s; want 409 fence_draining, Retry-After: 1", w.Code, w.Header(), w.Body)
	}
	if rec, err := st.LoadFence(ctx, "/r"); err != nil || rec.Highest != 7 {
		t.Fatalf("the stored fence after the refused reset: %+v, %v; want highest 7", rec, err)
	}

	p.Release()
	if w := reset(); w.Code != http.StatusOK {
		t.Fatalf("reset after the write ended: %d %s", w.Code, w.Body)
	}
	if rec, err := st.LoadFence(ctx, "/r"); err != nil || rec.Highest != 2 {
		t.Fatalf("the stored fence after the reset: %+v, %v; want highest 2", rec, err)
	}
}
