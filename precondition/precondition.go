// Package precondition is the ETag bookkeeping behind `precondition: etag`,
// shared by the plain HTTP upstream (adapters/relay) and the S3
// adapter: per fenced object the gateway remembers the ETag its last
// accepted write produced, makes the next write conditional on it (RFC 9110
// If-Match, or If-None-Match: * for an object it knows absent) and answers a
// 412 to that condition as precondition_failed. A request already handed to
// the upstream but delayed (a partition, a crashed gateway) then carries a
// condition on a version that a newer write has replaced, and the upstream
// refuses it: the window that fencing alone cannot close (docs/design.md §4).
//
// The mechanism, in order:
//
//   - Begin loads the recorded ETag. An unknown one (fencegate.ETagUnknown:
//     the outcome of the last write is not known) is re-learnt with a HEAD.
//   - Before the write is forwarded the record is marked unknown
//     (write-ahead): if the gateway dies after the upstream applied the
//     write but before its ETag was recorded, the record does not keep
//     naming the replaced version, which would fail every later write; the
//     next write learns the ETag with a HEAD instead. A failed mark refuses
//     the write, unforwarded. The mark is durable before the forward; a
//     store may make it so once for many writes (the embedded store keeps
//     the object unknown in its file while it keeps the records in memory;
//     see Store).
//   - The records only choose the condition of the gateway's next write; a
//     late write carries its own older condition, which a newer applied
//     write has made false. A stale record therefore fails a write closed
//     (412) rather than letting one through (docs/design.md).
//   - Answered records the outcome: the answer's ETag, or one learnt with a
//     HEAD when the answer carries none (Apache's PUT); "" after a delete;
//     the version before for a write the upstream did not apply.
//
// Weak ETags. If-Match uses the strong comparison (RFC 9110 §13.1.1), so a
// weak ETag (W/"...") never matches. Apache serves a weak ETag for about a
// second after each write (its validator cannot tell two writes within one
// second apart) and the strong one, with the same opaque value, afterwards.
// The gateway records a weak ETag as such and, before making a write
// conditional on it, waits until the upstream serves it strong: until
// WeakSettle has passed since the gateway learnt it, or, when it did not
// learn it itself (another process, a restart), until a HEAD shows a strong
// ETag, bounded by StrongWait. Writes to one object on such a server are
// thereby spaced about a second apart. If-Unmodified-Since with
// Last-Modified was rejected as the fallback: its one-second resolution lets
// a delayed write landing within the second of the newer owner's write pass,
// which is the race the precondition exists to close.
package precondition

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/clock"
)

// Store keeps, per fenced object, the ETag of the last write the gateway
// made to it. The bolt and postgres stores implement it on their fence
// records.
type Store interface {
	// LastETag returns the recorded ETag of resource: "" if the gateway has
	// not written the object (or deleted it), fencegate.ETagUnknown if the
	// outcome of its last write is not known.
	LastETag(ctx context.Context, resource string) (string, error)
	// RecordETag stores etag as resource's current version, unless a write
	// with a newer token already recorded one. Once it returned, a crash
	// may lose the record only by leaving resource unknown
	// (fencegate.ETagUnknown), never by bringing back an older value: a
	// store may keep records in memory if every object it does so for is
	// durably unknown in its file (the embedded store, whose file one
	// process owns); a store several gateways share writes through
	// (PostgreSQL).
	RecordETag(ctx context.Context, resource string, token int64, etag string) error
}

// DurableRecorder is implemented by a Store that keeps records in memory.
// RecordETagDurable is RecordETag with the record itself on disk before it
// returns. The tracker uses it for the record of a write the upstream
// refused (412): that record keeps the object's next writes refused rather
// than re-learnt, and must survive a crash for that (an unknown record is
// re-learnt with a HEAD and the object overwritten).
type DurableRecorder interface {
	RecordETagDurable(ctx context.Context, resource string, token int64, etag string) error
}

// Forgetter is implemented by a Store that can mark every record below a
// key unknown at once. The tracker uses it for namespace operations the
// gateway forwards (a collection deleted or moved, a Destination
// overwritten), which change objects without a write to each: their next
// writes re-learn the ETag with a HEAD instead of failing a precondition
// on a version the gateway's own forward replaced.
type Forgetter interface {
	// ForgetETagsBelow marks every record whose resource starts with
	// prefix unknown (and its token at least token), durably.
	ForgetETagsBelow(ctx context.Context, prefix string, token int64) error
}

// ForgetBelow marks every record below prefix unknown (Forgetter). A store
// without it cannot, and says so.
func (t *Tracker) ForgetBelow(ctx context.Context, prefix string, token int64) error {
	f, ok := t.Store.(Forgetter)
	if !ok {
		return errors.New("the ETag store cannot forget records below a key")
	}
	return f.ForgetETagsBelow(ctx, prefix, token)
}

// Kind says what a successful write leaves behind, for the bookkeeping.
type Kind int

const (
	// Replace writes a new version whose ETag the answer carries, or a HEAD
	// learns (PUT, PATCH, S3 PutObject).
	Replace Kind = iota
	// Delete leaves no object.
	Delete
	// Opaque writes a version whose ETag is not in the answer's headers
	// (S3 CopyObject and CompleteMultipartUpload answer it in the body, a
	// POST may change the object or not): the next write re-learns it.
	Opaque
)

// HeadFunc asks the upstream for the object's current ETag header value
// ("" if the object does not exist).
type HeadFunc func(ctx context.Context) (string, error)

// Tracker does the bookkeeping of one route. Its fields are set before use.
type Tracker struct {
	// Store records the ETags; required.
	Store Store
	// Route names the route in logs.
	Route string
	// Upstream names the upstream in refusal messages ("S3", "the upstream").
	// Empty: "the upstream".
	Upstream string
	// Log receives the precondition_failed line. Nil: slog.Default().
	Log *slog.Logger
	// WeakSettle is how long after the gateway learnt a weak ETag the
	// upstream serves it strong. Zero: 1.1s (Apache: one second).
	WeakSettle time.Duration
	// StrongWait bounds waiting for a strong ETag the gateway did not learn
	// itself, polling with HEAD. Zero: 2s. The route's timeout bounds it too.
	StrongWait time.Duration
}

// Write is the bookkeeping of one forwarded write, from Begin to Answered
// or Failed.
type Write struct {
	t        *Tracker
	resource string
	token    int64
	kind     Kind
	head     HeadFunc
	// before is the object's ETag as recorded (or learnt with a HEAD)
	// before the write was marked unknown: restored when the upstream
	// answers that it did not apply the write.
	before string
	// IfMatch is the If-Match value the gateway adds ("" none).
	IfMatch string
	// IfNoneMatch: the gateway adds If-None-Match: *.
	IfNoneMatch bool
}

// Conditional reports whether the gateway adds a precondition to the write.
func (w *Write) Conditional() bool { return w.IfMatch != "" || w.IfNoneMatch }

// Apply sets the gateway's precondition on an outbound request's headers.
func (w *Write) Apply(h http.Header) {
	if w.IfMatch != "" {
		h.Set("If-Match", w.IfMatch)
	}
	if w.IfNoneMatch {
		h.Set("If-None-Match", "*")
	}
}

// Begin prepares the write of token to resource: it loads the recorded ETag
// (re-learning an unknown one with head), marks the record unknown and, if
// conditional, computes the precondition the gateway adds. With conditional
// false (the worker sent its own precondition, which a delayed request
// cannot satisfy after a newer write either; or the upstream does not take
// one on this operation) the write is only marked and tracked. A refusal is
// a *fencegate.Error; nothing was forwarded.
func (t *Tracker) Begin(ctx context.Context, resource string, token int64, kind Kind, conditional bool, head HeadFunc) (*Write, error) {
	w := &Write{t: t, resource: resource, token: token, kind: kind, head: head}
	etag, err := t.Store.LastETag(ctx, resource)
	if err != nil {
		return nil, fencegate.Unavailable(resource, fmt.Errorf("load etag: %w", err))
	}
	w.before = etag
	if !conditional {
		return w, w.markUnknown(ctx, etag)
	}
	switch {
	case etag == fencegate.ETagUnknown:
		if etag, err = w.learnStrong(ctx); err != nil {
			return nil, t.headFailed(resource, err)
		}
		// The record stays unknown (nothing to mark) until the outcome.
		w.before = etag
	case isWeak(etag):
		// The weak record names the version the gateway wrote; wait until
		// the upstream compares it strongly.
		if err := w.settle(ctx, etag); err != nil {
			return nil, t.headFailed(resource, err)
		}
		fallthrough
	default:
		if err := w.markUnknown(ctx, etag); err != nil {
			return nil, err
		}
	}
	switch {
	case etag != "":
		w.IfMatch = `"` + strings.TrimPrefix(etag, "W/") + `"`
	case kind == Delete:
		// Deleting what is not there needs no guard.
	default:
		// An object the gateway knows absent (never wrote, or deleted).
		w.IfNoneMatch = true
	}
	return w, nil
}

func (t *Tracker) headFailed(resource string, err error) error {
	return &fencegate.Error{Code: fencegate.CodeUpstreamUnavailable,
		Message: "cannot learn the object's current ETag from the upstream", Resource: resource, Err: err}
}

// Response does the bookkeeping of the upstream's answer to the write
// (Answered) inside an upstream's RoundTripper: it returns resp, or the
// precondition_failed refusal with the answer read (a bounded amount, so
// the connection can be reused) and closed.
func (w *Write) Response(ctx context.Context, resp *http.Response) (*http.Response, error) {
	if err := w.Answered(ctx, resp.StatusCode, resp.Header.Get("ETag")); err != nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, fencegate.MaxRefusalBody))
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// Answered does the bookkeeping of the upstream's answer (status and ETag
// header). A 412 to the gateway's precondition becomes the
// precondition_failed refusal, returned; the caller discards the answer.
func (w *Write) Answered(ctx context.Context, status int, etagHeader string) error {
	switch {
	case status == http.StatusPreconditionFailed && w.Conditional() && w.ownCondition(ctx):
		// The object is the version the gateway's condition named: the
		// worker's own condition failed (WebDAV If:, or an If-Match the
		// gateway's replaced), and the upstream's answer is the answer.
		w.record(ctx, w.before)
	case status == http.StatusPreconditionFailed && w.Conditional():
		// Not applied: the record names the version the gateway wrote
		// again, so the next write is refused too rather than learning
		// (and overwriting) a bypassing version; durably, so that a crash
		// does not turn it into an unknown that the next write re-learns.
		w.recordDurable(ctx, w.before)
		return w.t.refusal(ctx, w)
	case status >= 200 && status < 300:
		switch w.kind {
		case Replace:
			etag := Normalize(etagHeader)
			if etag == "" && w.head != nil {
				// Apache's PUT answers no ETag: learn it at once, while
				// the write's permit is held.
				if h, err := w.head(ctx); err == nil {
					etag = Normalize(h)
				}
			}
			if etag == "" {
				etag = fencegate.ETagUnknown
			}
			if isWeak(etag) {
				noteWeak(w.resource, etag)
			}
			w.record(ctx, etag)
		case Delete:
			w.record(ctx, "")
		default:
			w.record(ctx, fencegate.ETagUnknown)
		}
	case status >= 500:
		// The record stays unknown (marked before the write).
	default:
		// A 3xx or 4xx: the upstream did not apply the write.
		w.record(ctx, w.before)
	}
	return nil
}

// ownCondition re-learns the object's ETag after a 412 and reports
// whether it is still the version the gateway's condition named (or still
// absent, for If-None-Match: *): then the gateway's condition held and the
// 412 was caused by one of the worker's own. A HEAD that fails explains
// nothing.
func (w *Write) ownCondition(ctx context.Context) bool {
	if w.head == nil {
		return false
	}
	etag, err := w.head(ctx)
	if err != nil {
		return false
	}
	if w.IfNoneMatch {
		return etag == ""
	}
	return etag != "" && strings.TrimPrefix(Normalize(etag), "W/") == strings.TrimPrefix(w.before, "W/")
}

// Failed records that the write's outcome is not known (a transport error:
// the request may or may not have reached the upstream).
func (w *Write) Failed(ctx context.Context) { w.record(ctx, fencegate.ETagUnknown) }

func (t *Tracker) refusal(ctx context.Context, w *Write) error {
	up := t.Upstream
	if up == "" {
		up = "the upstream"
	}
	log := t.Log
	if log == nil {
		log = slog.Default()
	}
	log.LogAttrs(ctx, slog.LevelError, fencegate.CodePreconditionFailed,
		slog.String("route", t.Route), slog.String("resource", w.resource),
		slog.Int64("token", w.token),
		slog.String("err", up+" refused the write's ETag precondition: the object was changed by a write that bypassed the gateway, or a delayed older write"))
	return &fencegate.Error{
		Code: fencegate.CodePreconditionFailed,
		Message: "the object is not the version this gateway last wrote (a write bypassed the gateway, or a delayed one landed); " +
			"nothing was written",
		Resource: w.resource, Token: w.token,
	}
}

func (w *Write) record(ctx context.Context, etag string) {
	w.store(ctx, etag, w.t.Store.RecordETag)
}

func (w *Write) recordDurable(ctx context.Context, etag string) {
	rec := w.t.Store.RecordETag
	if d, ok := w.t.Store.(DurableRecorder); ok {
		rec = d.RecordETagDurable
	}
	w.store(ctx, etag, rec)
}

func (w *Write) store(ctx context.Context, etag string, rec func(context.Context, string, int64, string) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := rec(ctx, w.resource, w.token, etag); err != nil {
		// The write is done; a stale record makes the next write fail
		// with precondition_failed, never succeed wrongly.
		log := w.t.Log
		if log == nil {
			log = slog.Default()
		}
		log.LogAttrs(ctx, slog.LevelError, "record etag failed",
			slog.String("route", w.t.Route), slog.String("resource", w.resource),
			slog.Int64("token", w.token), slog.String("err", err.Error()))
	}
}

// markUnknown records the object's ETag as unknown before the write is
// forwarded, unless it is already.
func (w *Write) markUnknown(ctx context.Context, current string) error {
	if current == fencegate.ETagUnknown {
		return nil
	}
	if err := w.t.Store.RecordETag(ctx, w.resource, w.token, fencegate.ETagUnknown); err != nil {
		return fencegate.Unavailable(w.resource, fmt.Errorf("mark etag unknown before the write: %w", err))
	}
	return nil
}

// learnStrong asks the upstream for the object's current ETag, polling
// while it is weak (bounded by StrongWait): a weak ETag never satisfies
// If-Match. After the bound the weak one is returned; the upstream then
// refuses the write (precondition_failed), never applies it wrongly.
func (w *Write) learnStrong(ctx context.Context) (string, error) {
	if w.head == nil {
		return "", fmt.Errorf("no way to learn the ETag")
	}
	wait := w.t.StrongWait
	if wait <= 0 {
		wait = 2 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		h, err := w.head(ctx)
		if err != nil {
			return "", err
		}
		etag := Normalize(h)
		if !isWeak(etag) || !time.Now().Before(deadline) {
			return etag, nil
		}
		noteWeak(w.resource, etag)
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return "", err
		}
	}
}

// settle waits until a recorded weak ETag is served strong.
func (w *Write) settle(ctx context.Context, etag string) error {
	settle := w.t.WeakSettle
	if settle <= 0 {
		settle = 1100 * time.Millisecond
	}
	if at, ok := weakSeen(w.resource, etag); ok {
		// The version existed when the gateway saw it weak, so its
		// modification time is no later: after settle it is served strong
		// unless it was replaced, in which case If-Match fails anyway.
		return sleep(ctx, time.Until(at.Add(settle)))
	}
	// Poll: a HEAD served strong means the window has passed (or the
	// object changed since the record, and If-Match on the recorded version
	// fails at the upstream, as it must).
	_, err := w.learnStrong(ctx)
	return err
}

// sleep is clock.Sleep: the one pause of the module.
var sleep = clock.Sleep

// Normalize turns an ETag header value into its recorded form: the opaque
// value without quotes for a strong ETag, W/ and the opaque value for a
// weak one, "" for none.
func Normalize(h string) string {
	h = strings.TrimSpace(h)
	weak := strings.HasPrefix(h, "W/")
	h = strings.Trim(strings.TrimPrefix(h, "W/"), `"`)
	if h == "" {
		return ""
	}
	if weak {
		return "W/" + h
	}
	return h
}

func isWeak(etag string) bool { return strings.HasPrefix(etag, "W/") }

// weak remembers when the gateway saw a weak ETag, per object and value, so
// that a write following it need not poll the upstream to know when it is
// strong. It is shared by every route of the process (two routes may front
// one object); an entry names a version that existed at that time, which
// holds whichever route saw it.
var weak = struct {
	sync.Mutex
	seen map[string]time.Time
}{seen: make(map[string]time.Time)}

const maxWeak = 4096

func noteWeak(resource, etag string) {
	now := time.Now()
	weak.Lock()
	defer weak.Unlock()
	// The latest sighting: waiting from it is never too short.
	k := resource + "\x00" + etag
	if len(weak.seen) >= maxWeak {
		for k, at := range weak.seen {
			if now.Sub(at) > 10*time.Second {
				delete(weak.seen, k)
			}
		}
		if len(weak.seen) >= maxWeak {
			clear(weak.seen) // forgetting only costs a HEAD poll
		}
	}
	weak.seen[k] = now
}

func weakSeen(resource, etag string) (time.Time, bool) {
	weak.Lock()
	defer weak.Unlock()
	at, ok := weak.seen[resource+"\x00"+etag]
	return at, ok
}

// PinsVersion reports whether the request's own preconditions (a worker's
// If-Match and If-None-Match) pin the version the write may replace, so
// that a request delayed past a newer write cannot satisfy them: an
// If-Match listing only specific entity-tags (the newer write has another
// one), or If-None-Match: * (the newer write made the object exist). Such
// a condition may take the place of the gateway's own. Others do not pin
// a version and must not replace it: If-Match: * holds for any existing
// version, the newer owner's included, and If-None-Match on an
// entity-tag holds for every version but that one.
func PinsVersion(h http.Header) bool {
	if vs := h.Values("If-None-Match"); len(vs) == 1 && strings.TrimSpace(vs[0]) == "*" {
		return true
	}
	vs := h.Values("If-Match")
	if len(vs) == 0 {
		return false
	}
	for _, v := range vs {
		if !PinsETags(v) {
			return false
		}
	}
	return true
}

// PinsETags reports whether an If-Match value (or an S3 DeleteObjects
// <ETag>) lists only specific entity-tags: not *, and no empty element of
// a list, which some servers read as a match.
func PinsETags(v string) bool {
	for e := range strings.SplitSeq(v, ",") {
		if e = strings.TrimSpace(e); e == "" || e == "*" {
			return false
		}
	}
	return true
}
