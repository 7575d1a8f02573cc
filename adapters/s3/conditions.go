package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"
	"net/http"
	"strings"

	"github.com/fencegate/fencegate/precondition"
)

// Conditions says which conditional forms of the writes beyond PutObject
// and CompleteMultipartUpload the upstream honours. ProbeConditions
// measures them against the real store; the gateway adds a condition only
// to an operation the store honours and forwards the others unconditioned
// (still fenced).
type Conditions struct {
	// Measured: the values come from ProbeConditions. Unmeasured (no
	// s3.check_bucket), only DeleteObject gets If-Match: AWS documents
	// it, and a store that ignores it deletes as if unconditioned.
	Measured bool
	// Delete: DeleteObject with If-Match on a wrong ETag is refused (412)
	// and leaves the object, on the right one deletes it, and a conditional
	// delete racing conditional overwrites of the same version loses or
	// wins alone.
	Delete Finding
	// DeleteObjects: an <ETag> in a DeleteObjects <Object> is checked per
	// object (the entry fails with an <Error>, the object stays).
	DeleteObjects Finding
	// CopyDest: If-Match / If-None-Match: * on CopyObject apply to the
	// destination object (not the source).
	CopyDest Finding
}

// Finding is the probe's verdict on one conditional operation.
type Finding struct {
	Honoured bool
	// Detail says what the probe saw when the store does not honour it.
	Detail string
}

// Operation names, as doctor and the logs print them.
const (
	OpDeleteIfMatch      = "DeleteObject If-Match"
	OpDeleteObjectsETag  = "DeleteObjects <ETag>"
	OpCopyDestConditions = "CopyObject destination If-Match/If-None-Match"
)

// Each calls fn with every operation's name and finding, in a fixed order.
func (c Conditions) Each(fn func(op string, f Finding)) {
	fn(OpDeleteIfMatch, c.Delete)
	fn(OpDeleteObjectsETag, c.DeleteObjects)
	fn(OpCopyDestConditions, c.CopyDest)
}

var unmeasured = Conditions{Delete: Finding{Honoured: true}}

// Conditions returns what the gateway currently relies on.
func (u *Upstream) Conditions() Conditions {
	if c := u.conds.Load(); c != nil {
		return *c
	}
	return unmeasured
}

// SetConditions makes the gateway rely on c (ProbeConditions calls it).
func (u *Upstream) SetConditions(c Conditions) { u.conds.Store(&c) }

// deleteWrite is the ETag bookkeeping of one object of a DeleteObjects.
type deleteWrite struct {
	key string // the object key as the body names it
	w   *precondition.Write
	// ambiguous: the worker's <LastModifiedTime> or <Size> goes beside the
	// gateway's <ETag>, so a PreconditionFailed entry may be either's.
	ambiguous bool
	head      precondition.HeadFunc
}

// addDeleteObjectsPreconditions tracks each object of a DeleteObjects and,
// where the store honours per-object <ETag> conditions, adds the ETag the
// gateway last wrote to the entries that carry none. It returns the body to
// forward (nil: the original bytes).
func (u *Upstream) addDeleteObjectsPreconditions(r *http.Request, f *forward, d *deleteRequest, resourceOf func(bucket, key string) (string, error)) ([]byte, error) {
	cond := u.Conditions().DeleteObjects.Honoured
	type group struct {
		resource string
		key      string
		entries  []int
		worker   bool // an entry carries a version, or the worker's own <ETag> on one
		other    bool // an entry carries the worker's <LastModifiedTime> or <Size>
	}
	var groups []*group
	byRes := map[string]*group{}
	for i, k := range d.keys {
		res, err := resourceOf(f.State.target.bucket, k)
		if err != nil {
			return nil, err
		}
		g := byRes[res]
		if g == nil {
			g = &group{resource: res, key: k}
			byRes[res] = g
			groups = append(groups, g)
		}
		g.entries = append(g.entries, i)
		o := d.doc.objects[i]
		if v, ok := o.fields["ETag"]; ok && precondition.PinsETags(v) {
			// The worker's <ETag> on a version replaces the gateway's, as
			// its If-Match does. <ETag>*</ETag> holds for a newer owner's
			// version too (precondition.PinsVersion): the gateway's <ETag>
			// replaces it, where it has one.
			g.worker = true
		}
		if _, ok := o.fields["VersionId"]; ok {
			g.worker = true
		}
		for _, name := range []string{"LastModifiedTime", "Size"} {
			// A time or a size can hold for a newer owner's version too:
			// kept beside the gateway's <ETag> (combineConditions).
			if _, ok := o.fields[name]; ok {
				g.other = true
			}
		}
	}
	rewrite := false
	for _, g := range groups {
		kind := precondition.Delete
		if _, versioned := d.doc.objects[g.entries[0]].fields["VersionId"]; versioned || g.worker {
			// A version's deletion may leave the current object; the next
			// write re-learns its ETag.
			kind = precondition.Opaque
		}
		t := target{bucket: f.State.target.bucket, key: g.key, op: opDeleteObject}
		w, err := u.Tracker().Begin(r.Context(), g.resource, f.Token, kind, cond && !g.worker,
			func(ctx context.Context) (string, error) { return u.headETag(ctx, t) })
		if err != nil {
			// Objects already begun stay marked unknown: re-learnt later.
			return nil, err
		}
		f.State.deletes = append(f.State.deletes, deleteWrite{key: d.doc.objects[g.entries[0]].fields["Key"], w: w,
			ambiguous: g.other, head: func(ctx context.Context) (string, error) { return u.headETag(ctx, t) }})
		if w.IfMatch != "" {
			for _, i := range g.entries {
				d.doc.objects[i].set("ETag", w.IfMatch)
			}
			rewrite = true
		}
	}
	if !rewrite {
		return nil, nil
	}
	return d.doc.encode(), nil
}

func (o *deleteObject) set(name, value string) {
	if _, ok := o.fields[name]; !ok {
		o.order = append(o.order, name)
	}
	o.fields[name] = value
}

// encode writes the document anew, canonically: the same objects, fields
// and order, in S3's namespace.
func (d *deleteDoc) encode() []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	b.WriteString(`<Delete xmlns="` + s3Namespace + `">`)
	if d.quiet != nil {
		b.WriteString("<Quiet>")
		xml.EscapeText(&b, []byte(*d.quiet))
		b.WriteString("</Quiet>")
	}
	for _, o := range d.objects {
		b.WriteString("<Object>")
		for _, name := range o.order {
			b.WriteString("<" + name + ">")
			xml.EscapeText(&b, []byte(o.fields[name]))
			b.WriteString("</" + name + ">")
		}
		b.WriteString("</Object>")
	}
	b.WriteString("</Delete>")
	return b.Bytes()
}

// bodyChecksums are the integrity headers a request body may carry that
// the gateway can compute, by canonical header name.
var bodyChecksums = map[string]func() hash.Hash{
	"Content-Md5":              md5.New,
	"X-Amz-Checksum-Crc32":     func() hash.Hash { return crc32.NewIEEE() },
	"X-Amz-Checksum-Crc32c":    func() hash.Hash { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) },
	"X-Amz-Checksum-Crc64nvme": func() hash.Hash { return crc64.New(crc64.MakeTable(0x9a6c9329ac4bc9b5)) },
	"X-Amz-Checksum-Sha1":      sha1.New,
	"X-Amz-Checksum-Sha256":    sha256.New,
}

func checksum(newHash func() hash.Hash, body []byte) string {
	h := newHash()
	h.Write(body)
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// rebody checks the worker's integrity headers against the body it sent
// and computes them for the body the gateway forwards instead. ok false:
// a header the gateway cannot compute (the body is then forwarded as sent).
// A worker's header that does not match its own body is refused, as S3
// would have: rewriting must not launder a corrupted request.
func rebody(h http.Header, payloadHash string, old, body []byte) (set map[string]string, newPayload string, ok bool, serr *s3Error) {
	set = map[string]string{}
	for name := range h {
		if !strings.HasPrefix(name, "X-Amz-Checksum-") && name != "Content-Md5" {
			continue
		}
		if name == "X-Amz-Checksum-Type" || name == "X-Amz-Checksum-Algorithm" {
			continue
		}
		nh, known := bodyChecksums[name]
		if !known {
			return nil, "", false, nil
		}
		if h.Get(name) != checksum(nh, old) {
			return nil, "", false, &s3Error{http.StatusBadRequest, "BadDigest", "the " + name + " you specified did not match the body"}
		}
		set[name] = checksum(nh, body)
	}
	newPayload = payloadHash
	if len(payloadHash) == 64 && isHex(payloadHash) {
		sum := sha256.Sum256(old)
		if hex.EncodeToString(sum[:]) != payloadHash {
			return nil, "", false, &s3Error{http.StatusBadRequest, "XAmzContentSHA256Mismatch", "the provided x-amz-content-sha256 does not match the body"}
		}
		sum = sha256.Sum256(body)
		newPayload = hex.EncodeToString(sum[:])
	}
	return set, newPayload, true, nil
}

// deleteResult is the part of S3's DeleteObjects answer the bookkeeping
// reads: the objects that were not deleted, with why.
type deleteResult struct {
	Errors []struct {
		Key  string `xml:"Key"`
		Code string `xml:"Code"`
	} `xml:"Error"`
}

// maxDeleteResult bounds the DeleteObjects answer the gateway reads to do
// its bookkeeping (1000 entries with 1024-byte keys and messages).
const maxDeleteResult = 8 << 20

// deletesAnswered does the bookkeeping of a DeleteObjects answer: an
// object with no <Error> entry was deleted (Quiet answers list errors
// only); one refused on the gateway's <ETag> keeps its record and is
// logged as precondition_failed (unless a condition of the worker's beside
// it failed: preconditionFailed); one refused otherwise is re-learnt. The
// answer itself is passed on unchanged.
func (f *state) deletesAnswered(ctx context.Context, resp *http.Response) {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		for _, d := range f.deletes {
			d.w.Answered(ctx, resp.StatusCode, "")
		}
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDeleteResult+1))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var res deleteResult
	if err != nil || len(body) > maxDeleteResult || xml.Unmarshal(body, &res) != nil {
		for _, d := range f.deletes {
			d.w.Failed(ctx)
		}
		return
	}
	failed := map[string]string{}
	for _, e := range res.Errors {
		failed[e.Key] = e.Code
	}
	for _, d := range f.deletes {
		code, refused := failed[d.key]
		switch {
		case !refused:
			d.w.Answered(ctx, http.StatusNoContent, "")
		case code == "PreconditionFailed" && d.w.Conditional():
			if preconditionFailed(ctx, d.w, d.ambiguous, d.head) {
				// The worker's <LastModifiedTime> or <Size> failed.
				continue
			}
			// Logged (precondition_failed, route, resource, token); the
			// other objects' outcomes stand, so the answer is not replaced.
			_ = d.w.Answered(ctx, http.StatusPreconditionFailed, "")
		default:
			d.w.Failed(ctx)
		}
	}
}
