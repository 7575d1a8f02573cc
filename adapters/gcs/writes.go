package gcs

import "net/http"

// Write is an object a request writes, as the gateway fences it; Name is
// "" for a write of the whole bucket.
type Write struct{ Bucket, Name string }

// Writes is the gateway's classification of a request, for tests that
// compare it with what a store changes (the write-set oracle): the objects
// the gateway fences the request on, or the refusal it answers before the
// fence. body is the request's body (nil: none); r's own Body is not read.
// A request on an upload session is refused here: its binding is checked
// with the key of the upstream that opened it.
func Writes(r *http.Request, body []byte) ([]Write, error) {
	t, ref := parseTarget(r)
	if ref != nil {
		return nil, ref
	}
	u := &Upstream{}
	if ref := u.check(&t, 0); ref != nil {
		return nil, ref
	}
	if ref := checkBodyHeaders(r, &t); ref != nil {
		return nil, ref
	}
	if body == nil {
		body = []byte{}
	}
	r = r.Clone(r.Context())
	r.Body, r.ContentLength = http.NoBody, int64(len(body))
	if err := u.body(r, &forward{In: r, State: &state{target: t, bodyLen: -1}, Body: body}); err != nil {
		return nil, err
	}
	return t.writes(), nil
}

// writes lists the objects t writes, its first the one whose generation
// and stamp the gateway tracks.
func (t *target) writes() []Write {
	switch t.op {
	case opRead:
		return nil
	case opBucket:
		return []Write{{t.bucket, ""}}
	case opMove:
		w := []Write{{t.bucket, t.object}, {t.bucket2, t.object2}}
		for _, o := range t.also {
			w = append(w, Write{o[0], o[1]})
		}
		return w
	}
	return []Write{{t.bucket, t.object}}
}
