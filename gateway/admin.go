package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/httprefusal"
	"github.com/fencegate/fencegate/resource"
)

// FenceAPI serves the operator's fence endpoints on the admin listener:
//
//	GET  /v1/fences?resource=R       the fence record of R
//	POST /v1/fences/advance          {"resource":R,"token":T}: raise R's
//	                                 highest token to T (never lowers it)
//	POST /v1/fences/reset            {"resource":R,"to":T,"confirm":R}:
//	                                 lower R's fence to T, only if no token
//	                                 above T was ever issued for R
//
// The advance goes through the same Fence as writes, so older writes in
// flight are superseded exactly as by a worker's newer token. Resource
// names are canonicalized as the gateway's keys are
// (resource.CanonicalName). Advances and resets are logged at WARN with the
// authenticated operator.
type FenceAPI struct {
	Fence Fence
	Log   *slog.Logger // nil: slog.Default()
	// Limit, if set, is consulted before an advance: the cap of
	// fence.max_advance (above the highest token issued when tokens are
	// verified, above the fence's highest otherwise). A *fencegate.Error
	// refuses the advance.
	Limit func(ctx context.Context, resource string, token int64) error
	// RaiseTokens, if set, is called before the fence is advanced: every
	// token the coordinator issues afterwards is above the advanced value,
	// so the next lease is not locked out by it.
	RaiseTokens func(ctx context.Context, above int64) error
	// Reset, if set, serves POST /v1/fences/reset (nil: 409, with
	// ResetUnavailable as the reason).
	Reset            func(ctx context.Context, resource string, to int64, owner string) (fencegate.FenceState, error)
	ResetUnavailable string
	// Operator names the authenticated caller of r for the audit log (""
	// without auth).
	Operator func(r *http.Request) string
	// List, if set, serves GET /v1/fences without a resource parameter
	// (the console's paginated listing). Nil: resource is required.
	List http.Handler
}

// Register adds the endpoints to mux.
func (a *FenceAPI) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/fences", a.show)
	mux.HandleFunc("POST /v1/fences/advance", a.advance)
	mux.HandleFunc("POST /v1/fences/reset", a.reset)
}

func (a *FenceAPI) log() *slog.Logger {
	if a.Log != nil {
		return a.Log
	}
	return slog.Default()
}

func (a *FenceAPI) operator(r *http.Request) string {
	if a.Operator != nil {
		if op := a.Operator(r); op != "" {
			return op
		}
	}
	return "(unauthenticated) " + r.RemoteAddr
}

// canonical validates and canonicalizes an operator-given resource name.
func canonical(w http.ResponseWriter, name string) (string, bool) {
	if name == "" {
		httprefusal.WriteJSON(w, fencegate.Errorf(fencegate.CodeInvalidRequest, "resource is required"))
		return "", false
	}
	if len(name) > maxOperatorResource {
		httprefusal.WriteJSON(w, fencegate.Errorf(fencegate.CodeInvalidRequest, "resource is longer than %d bytes", maxOperatorResource))
		return "", false
	}
	c, err := resource.CanonicalName(name)
	if err != nil {
		httprefusal.WriteJSON(w, fencegate.Errorf(fencegate.CodeInvalidRequest, "resource: %v", err))
		return "", false
	}
	return c, true
}

// maxOperatorResource bounds operator-given resource names (the coordinator's
// limit on lease names).
const maxOperatorResource = 4000

func (a *FenceAPI) show(w http.ResponseWriter, r *http.Request) {
	if a.List != nil && !r.URL.Query().Has("resource") {
		a.List.ServeHTTP(w, r)
		return
	}
	res, ok := canonical(w, r.URL.Query().Get("resource"))
	if !ok {
		return
	}
	st, err := a.Fence.State(r.Context(), res)
	if err != nil {
		httprefusal.WriteJSON(w, fencegate.AsError(err))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

type advanceRequest struct {
	Resource string `json:"resource"`
	Token    int64  `json:"token"`
	Owner    string `json:"owner,omitempty"`
}

func decodeStrict(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, fencegate.MaxAPIBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		httprefusal.WriteJSON(w, fencegate.Errorf(fencegate.CodeInvalidRequest, "body: %v", err))
		return false
	}
	return true
}

// fenceRequest is the body of an advance or a reset: a resource and the
// token it is raised (or lowered) to.
type fenceRequest interface {
	target() (resource string, token int64, field string)
}

func (q *advanceRequest) target() (string, int64, string) { return q.Resource, q.Token, "token" }
func (q *resetRequest) target() (string, int64, string)   { return q.Resource, q.To, "to" }

// readFenceRequest decodes req strictly, requires a positive token and
// returns the canonical resource; on false the refusal was answered.
func readFenceRequest(w http.ResponseWriter, r *http.Request, req fenceRequest) (string, bool) {
	if !decodeStrict(w, r, req) {
		return "", false
	}
	res, token, field := req.target()
	if token <= 0 {
		httprefusal.WriteJSON(w, fencegate.Errorf(fencegate.CodeInvalidRequest, "resource and a positive %s are required", field))
		return "", false
	}
	return canonical(w, res)
}

func (a *FenceAPI) advance(w http.ResponseWriter, r *http.Request) {
	var req advanceRequest
	res, ok := readFenceRequest(w, r, &req)
	if !ok {
		return
	}
	if req.Owner == "" {
		req.Owner = "admin"
	}
	op := a.operator(r)
	ctx := r.Context()
	if a.Limit != nil {
		if err := a.Limit(ctx, res, req.Token); err != nil {
			a.log().LogAttrs(ctx, slog.LevelWarn, "fence_advance_refused",
				slog.String("resource", res), slog.Int64("token", req.Token), slog.String("operator", op), slog.String("err", err.Error()))
			httprefusal.WriteJSON(w, fencegate.AsError(err))
			return
		}
	}
	if a.RaiseTokens != nil {
		if err := a.RaiseTokens(ctx, req.Token); err != nil {
			httprefusal.WriteJSON(w, fencegate.Unavailable(res, err))
			return
		}
	}
	st, err := a.Fence.Advance(ctx, res, req.Token, req.Owner)
	if err != nil {
		httprefusal.WriteJSON(w, fencegate.AsError(err))
		return
	}
	a.log().LogAttrs(ctx, slog.LevelWarn, "fence_advanced_by_hand",
		slog.String("resource", res), slog.Int64("token", req.Token),
		slog.Int64("highest", st.Highest), slog.String("owner", req.Owner), slog.String("operator", op))
	writeJSON(w, http.StatusOK, st)
}

type resetRequest struct {
	Resource string `json:"resource"`
	To       int64  `json:"to"`
	// Confirm must repeat the resource: a reset is never a typo away.
	Confirm string `json:"confirm"`
	Owner   string `json:"owner,omitempty"`
}

func (a *FenceAPI) reset(w http.ResponseWriter, r *http.Request) {
	var req resetRequest
	res, ok := readFenceRequest(w, r, &req)
	if !ok {
		return
	}
	if c, err := resource.CanonicalName(req.Confirm); err != nil || c != res {
		httprefusal.WriteJSON(w, fencegate.Errorf(fencegate.CodeInvalidRequest,
			`a reset lowers a fence: repeat the resource in "confirm" to do it`))
		return
	}
	if a.Reset == nil {
		e := httprefusal.WithStatus(http.StatusConflict, fencegate.Errorf(fencegate.CodeInvalidRequest, "fence reset is not available here: %s", a.ResetUnavailable))
		e.Resource = res
		httprefusal.WriteJSON(w, e)
		return
	}
	if req.Owner == "" {
		req.Owner = "admin-reset"
	}
	op := a.operator(r)
	ctx := r.Context()
	before, _ := a.Fence.State(ctx, res)
	st, err := a.Reset(ctx, res, req.To, req.Owner)
	if err != nil {
		a.log().LogAttrs(ctx, slog.LevelWarn, "fence_reset_refused",
			slog.String("resource", res), slog.Int64("to", req.To), slog.String("operator", op), slog.String("err", err.Error()))
		e := fencegate.AsError(err)
		if errors.Is(err, errWritesInFlight) {
			e = httprefusal.WithStatus(http.StatusConflict, e)
		}
		httprefusal.WriteJSON(w, e)
		return
	}
	a.log().LogAttrs(ctx, slog.LevelWarn, "fence_reset_by_hand",
		slog.String("resource", res), slog.Int64("from", before.Highest), slog.Int64("to", req.To),
		slog.Int64("highest", st.Highest), slog.String("owner", req.Owner), slog.String("operator", op))
	writeJSON(w, http.StatusOK, st)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n'))
}
