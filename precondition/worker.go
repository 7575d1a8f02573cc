package precondition

import "context"

// Holds reports whether the gateway's own precondition on the write holds
// for an object whose ETag header is now etagHeader ("" for no object),
// compared as the upstream compares If-Match (strongly): the test for a
// 412 that the worker's own conditions, forwarded beside the gateway's,
// may have caused.
func (w *Write) Holds(etagHeader string) bool {
	etag := Normalize(etagHeader)
	switch {
	case w.IfMatch != "":
		return etag == Normalize(w.IfMatch) && !isWeak(etag)
	case w.IfNoneMatch:
		return etag == ""
	}
	return true
}

// WorkerRefused records that the upstream refused the write on a condition
// of the worker's own while the gateway's held (Holds): nothing was
// applied, the object is the version recorded before, and it is not a
// bypass. The upstream's answer goes to the worker as it is.
func (w *Write) WorkerRefused(ctx context.Context) { w.record(ctx, w.before) }
