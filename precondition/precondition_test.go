package precondition

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

type mapStore struct {
	sync.Mutex
	etag map[string]string
	tok  map[string]int64
	fail error
}

func newMapStore() *mapStore {
	return &mapStore{etag: map[string]string{}, tok: map[string]int64{}}
}

func (s *mapStore) LastETag(_ context.Context, r string) (string, error) {
	s.Lock()
	defer s.Unlock()
	return s.etag[r], s.fail
}

func (s *mapStore) RecordETag(_ context.Context, r string, token int64, etag string) error {
	s.Lock()
	defer s.Unlock()
	if s.fail != nil {
		return s.fail
	}
	if token >= s.tok[r] {
		s.etag[r], s.tok[r] = etag, token
	}
	return nil
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		`"abc"`: "abc", `W/"abc"`: "W/abc", ` "a b" `: "a b", "": "", `""`: "", "abc": "abc",
	} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestBookkeeping(t *testing.T) {
	ctx := context.Background()
	st := newMapStore()
	tr := &Tracker{Store: st, WeakSettle: time.Millisecond, StrongWait: time.Second}
	heads := 0
	head := func(tag string) HeadFunc {
		return func(context.Context) (string, error) { heads++; return tag, nil }
	}

	// Known absent: If-None-Match: *; the answer's ETag is recorded.
	w, err := tr.Begin(ctx, "r", 1, Replace, true, head(`"x"`))
	if err != nil || !w.IfNoneMatch || w.IfMatch != "" || st.etag["r"] != fencegate.ETagUnknown {
		t.Fatalf("first write: %+v %v, record %q; want If-None-Match and an unknown mark", w, err, st.etag["r"])
	}
	if err := w.Answered(ctx, 201, `"e1"`); err != nil || st.etag["r"] != "e1" {
		t.Fatalf("answered: %v, record %q; want e1", err, st.etag["r"])
	}
	// Known: If-Match. No ETag in the answer: learnt with a HEAD (weak).
	w, _ = tr.Begin(ctx, "r", 1, Replace, true, head(`W/"e2"`))
	if w.IfMatch != `"e1"` {
		t.Fatalf("If-Match %q; want \"e1\"", w.IfMatch)
	}
	w.Answered(ctx, 204, "")
	if st.etag["r"] != "W/e2" {
		t.Fatalf("record %q; want W/e2", st.etag["r"])
	}
	// A weak record: If-Match on the strong form, once settled.
	w, _ = tr.Begin(ctx, "r", 1, Replace, true, head(`"e2"`))
	if w.IfMatch != `"e2"` {
		t.Fatalf("If-Match %q after a weak record; want \"e2\"", w.IfMatch)
	}
	// A 412 to it: precondition_failed, and the record names e2 again.
	err = w.Answered(ctx, http.StatusPreconditionFailed, "")
	if !errors.Is(err, &fencegate.Error{Code: fencegate.CodePreconditionFailed}) || st.etag["r"] != "W/e2" {
		t.Fatalf("412: %v, record %q; want precondition_failed and W/e2", err, st.etag["r"])
	}
	// A transport failure: unknown; the next write re-learns with HEAD.
	w, _ = tr.Begin(ctx, "r", 1, Replace, true, head(`"e2"`))
	w.Failed(ctx)
	heads = 0
	w, _ = tr.Begin(ctx, "r", 1, Replace, true, head(`"e3"`))
	if heads != 1 || w.IfMatch != `"e3"` {
		t.Fatalf("after unknown: %d HEADs, If-Match %q; want 1 and \"e3\"", heads, w.IfMatch)
	}
	// Delete: "" afterwards, so the next write is If-None-Match: *.
	w.Answered(ctx, 204, `"e4"`)
	w, _ = tr.Begin(ctx, "r", 1, Delete, true, nil)
	w.Answered(ctx, 204, "")
	if st.etag["r"] != "" {
		t.Fatalf("record %q after delete; want empty", st.etag["r"])
	}
	// A failed mark refuses the write, unforwarded (fail closed).
	st.fail = errors.New("disk gone")
	if _, err := tr.Begin(ctx, "r", 1, Replace, true, nil); !errors.Is(err, &fencegate.Error{Code: fencegate.CodeFenceUnavailable}) {
		t.Fatalf("Begin on a failing store: %v; want fence_unavailable", err)
	}
}

// A weak ETag the gateway did not learn itself is polled until strong.
func TestWeakPolledUntilStrong(t *testing.T) {
	ctx := context.Background()
	st := newMapStore()
	st.etag["p"], st.tok["p"] = "W/v", 1
	tr := &Tracker{Store: st}
	n := 0
	w, err := tr.Begin(ctx, "p", 1, Replace, true, func(context.Context) (string, error) {
		if n++; n < 3 {
			return `W/"v"`, nil
		}
		return `"v"`, nil
	})
	if err != nil || n != 3 || w.IfMatch != `"v"` {
		t.Fatalf("Begin: %v after %d HEADs, If-Match %q; want 3 HEADs and \"v\"", err, n, w.IfMatch)
	}
}
