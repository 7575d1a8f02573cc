package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestInstrumentHandlerContext: the wrapped handler finds the Telemetry in
// its request's context, whether InstrumentHandler added it (a copy of the
// request) or the server's BaseContext did (the request itself, uncopied).
func TestInstrumentHandlerContext(t *testing.T) {
	tel, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	var got *Telemetry
	var seen *http.Request
	h := tel.InstrumentHandler("gateway", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, seen = fromContext(r.Context()), r
	}))
	for _, tc := range []struct {
		name string
		ctx  context.Context
		same bool // the handler gets the request it was given
	}{
		{"plain context", context.Background(), false},
		{"BaseContext", tel.WithContext(context.Background()), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequestWithContext(tc.ctx, "GET", "/", nil)
			h.ServeHTTP(httptest.NewRecorder(), r)
			if got != tel {
				t.Fatalf("handler found %p; want %p", got, tel)
			}
			if (seen == r) != tc.same {
				t.Fatalf("request passed on as is: %v; want %v", seen == r, tc.same)
			}
		})
	}
}
