package gcs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/httprefusal"
)

// A copyTo or rewriteTo gives the destination the source's metadata where
// its body names none, the source's stamp included: `fence rebuild` would
// raise the destination's fence only to the source's token, maybe below
// the destination's real one. On a stamping route the gateway reads the
// source (with its own credentials) and sends what the store would copy
// in the body, with its own stamp (set by body), on the condition that the
// source is still the generation and metageneration it read.

// copyMembers are the members of the destination's object resource the
// store takes from the source when the copy has no body, and only from a
// body when it has one (the gateway's always has): of the writable
// members, the metadata, the content members and customTime. The others
// come from the copy's parameters and the destination bucket's defaults
// in either case (acl, storageClass, kmsKeyName, the holds, retention).
var copyMembers = []string{"metadata", "contentType", "contentEncoding", "contentDisposition",
	"contentLanguage", "cacheControl", "customTime"}

// copyGuard is a stamped copy's condition on the source it read.
type copyGuard struct{ generation, metageneration string }

// sourceConditions are the worker's conditions on a copy's source, by the
// member of the source's resource each compares and whether it must match.
var sourceConditions = []struct {
	param, member string
	match         bool
}{
	{"ifSourceGenerationMatch", "generation", true},
	{"ifSourceGenerationNotMatch", "generation", false},
	{"ifSourceMetagenerationMatch", "metageneration", true},
	{"ifSourceMetagenerationNotMatch", "metageneration", false},
}

// copyDoc is a stamped copy's destination resource: the worker's doc (the
// body, checked by checkNames; empty for none) with the source's metadata
// and content members it does not name. The worker's own conditions on
// the source are evaluated against the source read, as the store would
// (failing: 412), and the copy is made conditional on it (f.State.guard).
func (u *Upstream) copyDoc(r *http.Request, f *forward, doc []byte) ([]byte, error) {
	t := &f.State.target
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fencegate.InvalidRequest("the query string: %v", err)
	}
	path := "/storage/v1/b/" + url.PathEscape(t.srcBucket) + "/o/" + url.PathEscape(t.srcObject) +
		"?fields=generation,metageneration," + strings.Join(copyMembers, ",")
	if g := q.Get("sourceGeneration"); g != "" {
		path += "&generation=" + url.QueryEscape(g)
	}
	resp, err := u.do(r.Context(), http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, httprefusal.WithStatus(http.StatusNotFound, &fencegate.Error{Code: fencegate.CodeNotFound,
			Message: "the copy source does not exist"})
	case http.StatusForbidden, http.StatusUnauthorized:
		return nil, &fencegate.Error{Code: fencegate.CodeForbidden,
			Message: "the gateway may not read the copy source, whose metadata a stamped copy carries"}
	default:
		return nil, fmt.Errorf("gcs: GET of the copy source %s/%s: %s", t.srcBucket, t.srcObject, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxObjectDoc+1))
	var src map[string]json.RawMessage
	if err == nil && len(b) <= maxObjectDoc {
		err = json.Unmarshal(b, &src)
	}
	if err != nil || len(b) > maxObjectDoc {
		return nil, fmt.Errorf("gcs: the copy source's resource %s/%s cannot be read (%d bytes): %v", t.srcBucket, t.srcObject, len(b), err)
	}
	read := func(member string) string { return strings.Trim(string(src[member]), `"`) }
	g := &copyGuard{generation: read("generation"), metageneration: read("metageneration")}
	if !digits(g.generation) || !digits(g.metageneration) {
		return nil, fmt.Errorf("gcs: the copy source %s/%s was answered without its generation and metageneration: the copy cannot be made conditional on it", t.srcBucket, t.srcObject)
	}
	for _, c := range sourceConditions {
		if v, ok := q[c.param]; ok && (read(c.member) == v[0]) != c.match {
			return nil, &fencegate.Error{Code: fencegate.CodePreconditionFailed,
				Message: fmt.Sprintf("the copy source's %s is %s: %s=%s does not hold", c.member, read(c.member), c.param, v[0])}
		}
	}
	dst := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(doc)) > 0 {
		if err := json.Unmarshal(doc, &dst); err != nil {
			return nil, fencegate.InvalidRequest("the request body is not a JSON object resource: %v", err)
		}
	}
	for _, m := range copyMembers {
		if _, named := dst[m]; !named && src[m] != nil {
			dst[m] = src[m]
		}
	}
	f.State.guard = g
	return json.Marshal(dst)
}

// digits reports whether s is a decimal number.
func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// rewrite sends a stamped copy (nothing else: g is nil) with its
// destination resource as JSON (sent even if the worker sent no body),
// the worker's conditions on the source's generation and metageneration
// (held by the source read) replaced by the gateway's.
func (g *copyGuard) rewrite(out *http.Request) {
	if g == nil {
		return
	}
	out.Header.Set("Content-Type", "application/json")
	kept := objectstore.KeepParams(out.URL.RawQuery, func(name string) bool {
		return name != "ifSourceGenerationMatch" && name != "ifSourceMetagenerationMatch"
	})
	out.URL.RawQuery = strings.Join(append(kept, "ifSourceGenerationMatch="+g.generation,
		"ifSourceMetagenerationMatch="+g.metageneration), "&")
}

// errStampedMove refuses a moveTo on a stamping route: it takes no body,
// so the destination keeps the source's metadata, stamp included (a fence
// rebuilt from it could be below the destination's). A copy (stamped with
// the request's token) and a delete of the source do the same move.
func errStampedMove() *fencegate.Error {
	return httprefusal.WithStatus(http.StatusNotImplemented, &fencegate.Error{Code: fencegate.CodeInvalidRequest,
		Message: "moveTo is not supported on a route with stamp: true (the destination would keep the source's stamp): copy the object (rewriteTo) and delete the source"})
}
