package s3

import (
	"context"
	"net/http"

	"github.com/fencegate/fencegate/precondition"
)

// noVersionETag is an entity-tag no S3 object has (S3 ETags are quoted hex
// digests, with a -N part count after multipart uploads). If-Match on it
// is the condition "the object exists and is no version": false whatever
// the object is, answered by the store as it answers any If-Match that
// fails, 404 NoSuchKey while the object is absent and 412 once it exists.
const noVersionETag = `"fencegate-no-version"`

// otherConditions are the worker's conditional headers besides If-Match
// and If-None-Match that a store evaluates on a write (S3's conditional
// deletes on size and modification time; the RFC 9110 date conditions).
// The gateway cannot evaluate them from its records: they go to the store
// beside the gateway's own condition.
var otherConditions = []string{
	"X-Amz-If-Match-Size", "X-Amz-If-Match-Last-Modified-Time",
	"If-Unmodified-Since", "If-Modified-Since",
}

// conditions is the one set of conditions the store sees on a write: the
// gateway's (the object is the version it last wrote: If-Match on its ETag,
// or absent) combined with the worker's own. The combined condition is the
// conjunction of both, written so that the store accepts it (VersityGW
// answers 501 to If-Match beside If-None-Match) and answers a request that
// fails the worker's condition as it would have answered the worker
// directly.
type conditions struct {
	ifMatch     string // set If-Match to this ("" leaves the worker's)
	ifNoneMatch bool   // set If-None-Match: *
	dropINM     bool   // remove the worker's If-None-Match
	// ambiguous: a condition of the worker's goes to the store beside the
	// gateway's, so a 412 may be either's. The gateway then asks the store
	// for the object's ETag: if its own condition held, the 412 is the
	// worker's and goes back as the store gave it.
	ambiguous bool
}

// combineConditions plans the conditions of a write the gateway makes
// conditional (w.Conditional()). A worker's condition that pins a version
// (precondition.PinsVersion) never reaches here: it is sent instead of
// the gateway's. What reaches here holds for more than one version, and
// is combined with the gateway's:
//
//   - the gateway's If-Match on ETag E: the worker's If-Match (*, or a list
//     with *) holds for E, so the gateway's replaces it; a worker's
//     If-None-Match on entity-tags and the other conditions are kept beside
//     it (ambiguous);
//   - the object known absent (the gateway's If-None-Match: *): the
//     worker's If-None-Match holds for an absent object and is replaced;
//     its If-Match (*) cannot hold together with absence, so the request
//     gets If-Match on noVersionETag and no If-None-Match: the store
//     answers as to the worker's If-Match on an absent object (404
//     NoSuchKey), and a 412 means the object exists, a bypass.
func combineConditions(h http.Header, w *precondition.Write) conditions {
	var c conditions
	if !w.Conditional() {
		return c
	}
	for _, name := range otherConditions {
		if _, ok := h[name]; ok {
			c.ambiguous = true
		}
	}
	_, workerIfMatch := h["If-Match"]
	_, workerINM := h["If-None-Match"]
	switch {
	case w.IfMatch != "":
		c.ifMatch = w.IfMatch
		if workerINM {
			c.ambiguous = true
		}
	case w.IfNoneMatch && workerIfMatch:
		c.ifMatch, c.dropINM = noVersionETag, true
	case w.IfNoneMatch:
		c.ifNoneMatch = true
	}
	return c
}

// apply sets the combined conditions on the outbound request's headers.
func (c conditions) apply(h http.Header) {
	if c.ifMatch != "" {
		h.Set("If-Match", c.ifMatch)
	}
	if c.ifNoneMatch {
		h.Set("If-None-Match", "*")
	}
	if c.dropINM {
		h.Del("If-None-Match")
	}
}

// preconditionFailed does the bookkeeping of a 412 to a write the gateway
// made conditional. It returns true when the worker's own condition caused
// it: the gateway's held (a HEAD shows the version it expected), so the
// 412 is the store's answer to the worker, passed on unchanged, and
// nothing is recorded as a bypass. A 412 it cannot explain that way (the
// object changed, or the HEAD failed) is the gateway's.
func preconditionFailed(ctx context.Context, w *precondition.Write, ambiguous bool, head precondition.HeadFunc) bool {
	if !ambiguous {
		return false
	}
	cur, err := head(ctx)
	if err != nil || !w.Holds(cur) {
		return false
	}
	w.WorkerRefused(ctx)
	return true
}
