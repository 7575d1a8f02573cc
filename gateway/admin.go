package gateway

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"

	"github.com/fencegate/fencegate"
)

// FenceAPI serves the operator's fence endpoints on the admin listener:
//
//	GET  /v1/fences?resource=R       the fence record of R
//	POST /v1/fences/advance          {"resource":R,"token":T}: raise R's
//	                                 highest token to T (never lowers it)
//
// The advance goes through the same Fence as writes, so older writes in
// flight are superseded exactly as by a worker's newer token.
type FenceAPI struct {
	Fence Fence
	Log   *slog.Logger // nil: slog.Default()
}

// Register adds the endpoints to mux.
func (a *FenceAPI) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/fences", a.show)
	mux.HandleFunc("POST /v1/fences/advance", a.advance)
}

func (a *FenceAPI) show(w http.ResponseWriter, r *http.Request) {
	res := r.URL.Query().Get("resource")
	if res == "" {
		fencegate.Errorf(http.StatusBadRequest, fencegate.CodeInvalidRequest, "query parameter resource is required").WriteJSON(w)
		return
	}
	st, err := a.Fence.State(r.Context(), res)
	if err != nil {
		asRefusal(err).WriteJSON(w)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

type advanceRequest struct {
	Resource string `json:"resource"`
	Token    int64  `json:"token"`
	Owner    string `json:"owner,omitempty"`
}

func (a *FenceAPI) advance(w http.ResponseWriter, r *http.Request) {
	var req advanceRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		fencegate.Errorf(http.StatusBadRequest, fencegate.CodeInvalidRequest, "body: %v", err).WriteJSON(w)
		return
	}
	if req.Resource == "" || req.Token <= 0 {
		fencegate.Errorf(http.StatusBadRequest, fencegate.CodeInvalidRequest, "resource and a positive token are required").WriteJSON(w)
		return
	}
	if req.Owner == "" {
		req.Owner = "admin"
	}
	st, err := a.Fence.Advance(r.Context(), req.Resource, req.Token, req.Owner)
	if err != nil {
		asRefusal(err).WriteJSON(w)
		return
	}
	log := a.Log
	if log == nil {
		log = slog.Default()
	}
	log.LogAttrs(r.Context(), slog.LevelWarn, "fence_advanced_by_hand",
		slog.String("resource", req.Resource), slog.Int64("token", req.Token),
		slog.Int64("highest", st.Highest), slog.String("owner", req.Owner))
	writeJSON(w, http.StatusOK, st)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n'))
}
