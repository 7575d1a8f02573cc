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
	cur := `"e2"`
	moving := func(context.Context) (string, error) { return cur, nil }
	w, _ = tr.Begin(ctx, "r", 1, Replace, true, moving)
	if w.IfMatch != `"e2"` {
		t.Fatalf("If-Match %q after a weak record; want \"e2\"", w.IfMatch)
	}
	// A 412 while the object is still e2: the worker's own condition
	// failed; the upstream's answer stands, the record is kept.
	if err := w.Answered(ctx, http.StatusPreconditionFailed, ""); err != nil || st.etag["r"] != "W/e2" {
		t.Fatalf("412 with the object unchanged: %v, record %q; want nil and W/e2", err, st.etag["r"])
	}
	w, _ = tr.Begin(ctx, "r", 1, Replace, true, moving)
	// A 412 after the object changed behind the gateway's back:
	// precondition_failed, and the record names e2 again.
	cur = `"bypass"`
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

// conditionalObject is an upstream object that evaluates If-Match and
// If-None-Match: * atomically with the write, as S3 does.
type conditionalObject struct {
	etag string // "" absent
	n    int
}

func (o *conditionalObject) put(w *Write) (int, string) {
	if (w.IfMatch != "" && w.IfMatch != `"`+o.etag+`"`) || (w.IfNoneMatch && o.etag != "") {
		return http.StatusPreconditionFailed, ""
	}
	o.n++
	o.etag = "v" + string(rune('0'+o.n))
	return http.StatusOK, `"` + o.etag + `"`
}

// Whatever a crash leaves of a record, a late write is never applied over
// a newer one: a lost record (unknown) is re-learnt and the late write is
// refused by the upstream; an older record (which the stores never leave,
// but the argument does not depend on it) fails the next write closed.
func TestLostRecordFailsClosed(t *testing.T) {
	ctx := context.Background()
	head := func(o *conditionalObject) HeadFunc {
		return func(context.Context) (string, error) {
			if o.etag == "" {
				return "", nil
			}
			return `"` + o.etag + `"`, nil
		}
	}
	write := func(tr *Tracker, o *conditionalObject, token int64) error {
		w, err := tr.Begin(ctx, "r", token, Replace, true, head(o))
		if err != nil {
			return err
		}
		status, etag := o.put(w)
		return w.Answered(ctx, status, etag)
	}
	for _, tc := range []struct {
		name     string
		crashed  string // the record after the crash
		wantNext string // "" success, or the refusal's code
	}{
		{"lost", fencegate.ETagUnknown, ""},
		{"absent", "", fencegate.CodePreconditionFailed},
		{"older", "v1", fencegate.CodePreconditionFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &conditionalObject{}
			st := newMapStore()
			tr := &Tracker{Store: st}
			for range 2 {
				if err := write(tr, o, 1); err != nil {
					t.Fatal(err)
				}
			}
			// The old owner's write, forwarded just before the crash.
			late, err := tr.Begin(ctx, "r", 1, Replace, true, head(o))
			if err != nil || late.IfMatch != `"v2"` {
				t.Fatalf("late write: %+v %v; want If-Match v2", late, err)
			}
			st.etag["r"] = tc.crashed
			tr = &Tracker{Store: st} // the restarted gateway
			err = write(tr, o, 2)
			switch {
			case tc.wantNext == "" && err != nil:
				t.Fatalf("next write: %v; want it applied after a HEAD", err)
			case tc.wantNext != "" && !errors.Is(err, &fencegate.Error{Code: tc.wantNext}):
				t.Fatalf("next write: %v; want %s", err, tc.wantNext)
			}
			before := o.etag
			if status, _ := o.put(late); tc.wantNext == "" && status != http.StatusPreconditionFailed {
				t.Fatalf("late write after the newer one: %d; want 412", status)
			} else if tc.wantNext != "" && before != "v2" {
				t.Fatalf("object %s; want v2 (the refused write applied nothing)", before)
			}
		})
	}
}
