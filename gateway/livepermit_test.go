package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/recorder"
)

// lapsingFence is a LocalFence whose permits stop holding once lapsed is
// set, as a shared fence's do when its replica can no longer prove its
// session.
type lapsingFence struct {
	*gateway.LocalFence
	lapsed atomic.Bool
}

type lapsingPermit struct {
	gateway.Permit
	f        *lapsingFence
	resource string
}

func (f *lapsingFence) Admit(ctx context.Context, w gateway.Write) (gateway.Permit, error) {
	p, err := f.LocalFence.Admit(ctx, w)
	if err != nil {
		return nil, err
	}
	return &lapsingPermit{Permit: p, f: f, resource: w.Resource}, nil
}

func (p *lapsingPermit) Live() error {
	if p.f.lapsed.Load() {
		return &fencegate.SessionLostError{Resource: p.resource, Err: errors.New("the replica cannot prove its lease alive")}
	}
	return nil
}

// A permit that stops holding while the body streams cuts the forward, and
// the client, still sending, is told why (503 fence_unavailable) instead of
// losing its connection without an answer; the upstream applies nothing.
func TestLivePermitCutAnswersTheClient(t *testing.T) {
	rec := &recorder.Recorder{}
	up := httptest.NewServer(rec)
	t.Cleanup(up.Close)
	f := &lapsingFence{LocalFence: gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{})}
	g := gateway.New(f, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	u, err := relay.New(relay.Options{URL: up.URL})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := gateway.NewRoute(gateway.RouteOptions{Name: "orders", PathPrefix: "/orders/", Resource: "{path}"}, u)
	if err != nil {
		t.Fatal(err)
	}
	g.SetRoutes([]*gateway.Route{rt})
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)

	pr, pw := io.Pipe()
	req, _ := http.NewRequest("PUT", srv.URL+"/orders/1", pr)
	req.Header.Set("Fencing-Token", "7")
	req.ContentLength = -1
	type answer struct {
		resp *http.Response
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		done <- answer{resp, err}
	}()
	if _, err := pw.Write([]byte("first half;")); err != nil {
		t.Fatal(err)
	}
	f.lapsed.Store(true)
	go func() {
		// The rest of the body, until the gateway stops reading it.
		for {
			if _, err := pw.Write([]byte("second half;")); err != nil {
				return
			}
		}
	}()
	a := <-done
	pw.CloseWithError(errors.New("test over"))
	if a.err != nil {
		t.Fatalf("the client got no answer: %v", a.err)
	}
	defer a.resp.Body.Close()
	var body struct {
		Error string `json:"error"`
	}
	json.NewDecoder(a.resp.Body).Decode(&body)
	if a.resp.StatusCode != http.StatusServiceUnavailable || body.Error != fencegate.CodeFenceUnavailable {
		t.Fatalf("answer = %d %q; want 503 %s", a.resp.StatusCode, body.Error, fencegate.CodeFenceUnavailable)
	}
	if h := rec.History(); len(h) != 0 {
		t.Fatalf("the upstream applied %+v; want nothing", h)
	}
}
