package s3

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/precondition"
)

// CheckConditionalWrites verifies that the upstream honours the conditional
// writes `precondition: etag` relies on. Some S3-compatible stores accept
// If-Match and If-None-Match on PutObject and silently ignore them, which
// would make the precondition a no-op. It writes, overwrites and deletes one
// probe object under fencegate-doctor/ in bucket, with the gateway's
// credentials.
func (u *Upstream) CheckConditionalWrites(ctx context.Context, bucket string) error {
	p := u.probe(bucket, "probe")
	defer p.Delete(context.WithoutCancel(ctx))
	etag := ""
	for _, s := range []struct {
		what, ifMatch string // ifMatch "": If-None-Match: *; "current": the ETag written first
		want          int
	}{
		{"If-None-Match: * on an absent object", "", http.StatusOK},
		{"If-None-Match: * on an existing object", "", http.StatusPreconditionFailed},
		{"If-Match with a wrong ETag", wrongETag, http.StatusPreconditionFailed},
		{"If-Match on the current ETag", "current", http.StatusOK},
	} {
		if s.ifMatch == "current" {
			s.ifMatch = etag
		}
		st, e, err := p.Put(ctx, "fencegate conditional write probe", s.ifMatch)
		switch {
		case err != nil:
			return err
		case st == s.want && etag == "":
			etag = e
		case st != s.want && s.want == http.StatusPreconditionFailed:
			return fmt.Errorf("upstream ignores conditional writes: PutObject with %s answered %d, want 412 Precondition Failed", s.what, st)
		case st != s.want:
			return fmt.Errorf("probe PutObject with %s answered %d, want 200", s.what, st)
		}
	}
	return nil
}

// ProbeRace runs the racing probe (objectstore.ProbeRace) against the
// upstream: concurrent conditional PutObjects to one fresh probe object
// under fencegate-doctor/ in bucket, of which exactly one may win per
// round.
func (u *Upstream) ProbeRace(ctx context.Context, bucket string, n int) error {
	// The doctor's line names the bucket itself.
	return objectstore.ProbeRace(ctx, "", bucket, u.probe(bucket, "race"), n)
}

// probe is a fresh probe object under fencegate-doctor/ in bucket.
func (u *Upstream) probe(bucket, name string) *s3Probe {
	var rnd [8]byte
	rand.Read(rnd[:])
	return &s3Probe{c: u.client(1), bucket: bucket, key: "fencegate-doctor/" + name + "-" + hex.EncodeToString(rnd[:])}
}

type s3Probe struct {
	c           *awss3.Client
	bucket, key string
}

func (p *s3Probe) Delete(ctx context.Context) {
	p.c.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(p.key)})
}

func (p *s3Probe) Put(ctx context.Context, body, ifMatch string) (int, string, error) {
	in := &awss3.PutObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(p.key), Body: strings.NewReader(body)}
	if ifMatch != "" {
		in.IfMatch = aws.String(ifMatch)
	} else {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := p.c.PutObject(ctx, in)
	if st := status(err); st != 0 {
		return st, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("probe PutObject %s/%s: %w", p.bucket, p.key, err)
	}
	return http.StatusOK, aws.ToString(out.ETag), nil
}

func (p *s3Probe) Head(ctx context.Context) (string, error) {
	return (&condProbe{c: p.c, bucket: p.bucket}).head(ctx, p.key)
}

// ProbeConditions measures which conditional forms of DeleteObject,
// DeleteObjects and CopyObject the upstream honours, with probe objects
// under fencegate-doctor/ in bucket (deleted afterwards), and makes the
// gateway rely on exactly those (SetConditions). n is the number of racing
// requests of the delete race (n <= 1: precondition.ProbeWriters). An
// error means the probe itself could not run (a probe object could not be
// written or read); an operation the store does not honour is a Finding,
// not an error.
func (u *Upstream) ProbeConditions(ctx context.Context, bucket string, n int) (Conditions, error) {
	if n <= 1 {
		n = precondition.ProbeWriters
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	p := &condProbe{c: u.client(1), bucket: bucket, prefix: "fencegate-doctor/cond-" + hex.EncodeToString(rnd[:]) + "-"}
	defer p.cleanup(context.WithoutCancel(ctx))
	c := Conditions{Measured: true}
	var err error
	if c.Delete, err = p.delete(ctx, n); err != nil {
		return c, err
	}
	if c.DeleteObjects, err = p.deleteObjects(ctx); err != nil {
		return c, err
	}
	if c.CopyDest, err = p.copyDest(ctx); err != nil {
		return c, err
	}
	u.SetConditions(c)
	return c, nil
}

type condProbe struct {
	c              *awss3.Client
	bucket, prefix string
	keys           []string
}

// wrongETag matches no object: an MD5-shaped value no probe body has.
const wrongETag = `"00000000000000000000000000000000"`

func (p *condProbe) key(name string) string {
	k := p.prefix + name
	p.keys = append(p.keys, k)
	return k
}

func (p *condProbe) cleanup(ctx context.Context) {
	for _, k := range p.keys {
		p.c.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(k)})
	}
}

func status(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// answered is a probe request's status: ok without an error, the store's
// status of an error answer, -1 for a request that got no answer.
func answered(err error, ok int) int {
	if err == nil {
		return ok
	}
	if st := status(err); st != 0 {
		return st
	}
	return -1
}

func (p *condProbe) put(ctx context.Context, key, body string) (string, error) {
	out, err := p.c.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(key), Body: strings.NewReader(body)})
	if err != nil {
		return "", fmt.Errorf("probe PutObject %s/%s: %w", p.bucket, key, err)
	}
	return aws.ToString(out.ETag), nil
}

// head returns the object's ETag, "" if it does not exist.
func (p *condProbe) head(ctx context.Context, key string) (string, error) {
	out, err := p.c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(key)})
	if status(err) == http.StatusNotFound {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("probe HeadObject %s/%s: %w", p.bucket, key, err)
	}
	return aws.ToString(out.ETag), nil
}

func notHonoured(format string, args ...any) Finding {
	return Finding{Detail: fmt.Sprintf(format, args...)}
}

// delete: If-Match on a wrong ETag must be refused and leave the object,
// on the right one delete it; then n/2 conditional deletes race n/2
// conditional overwrites of one version: either one overwrite wins and no
// delete, or deletes win and no overwrite.
func (p *condProbe) delete(ctx context.Context, n int) (Finding, error) {
	key := p.key("delete")
	etag, err := p.put(ctx, key, "fencegate delete probe")
	if err != nil {
		return Finding{}, err
	}
	del := func(ifMatch string) int {
		_, err := p.c.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(key), IfMatch: aws.String(ifMatch)})
		return answered(err, http.StatusNoContent)
	}
	st := del(wrongETag)
	cur, err := p.head(ctx, key)
	if err != nil {
		return Finding{}, err
	}
	switch {
	case st == -1:
		return Finding{}, fmt.Errorf("probe DeleteObject %s/%s failed", p.bucket, key)
	case cur == "":
		return notHonoured("a DeleteObject with If-Match on a wrong ETag deleted the object (answered %d): the condition is ignored", st), nil
	case st != http.StatusPreconditionFailed:
		return notHonoured("a DeleteObject with If-Match on a wrong ETag answered %d, want 412", st), nil
	}
	if st := del(etag); st < 200 || st > 299 {
		return notHonoured("a DeleteObject with If-Match on the current ETag answered %d, want 204: conditioned deletes would all fail", st), nil
	}
	if cur, err = p.head(ctx, key); err != nil {
		return Finding{}, err
	} else if cur != "" {
		return notHonoured("a DeleteObject with If-Match on the current ETag answered success and left the object"), nil
	}

	// The race.
	if etag, err = p.put(ctx, key, "fencegate delete race"); err != nil {
		return Finding{}, err
	}
	var (
		mu               sync.Mutex
		wg               sync.WaitGroup
		start            = make(chan struct{})
		putWon, delWon   int
		winner, otherErr string
	)
	loser := func(st int) bool {
		return st == http.StatusPreconditionFailed || st == http.StatusConflict || st == http.StatusNotFound
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if i%2 == 0 {
				out, err := p.c.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(key),
					Body: strings.NewReader(fmt.Sprintf("fencegate delete race writer %d", i)), IfMatch: aws.String(etag)})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					putWon++
					winner = aws.ToString(out.ETag)
				case !loser(status(err)):
					otherErr = fmt.Sprintf("a racing conditional PutObject: %v", err)
				}
				return
			}
			st := del(etag)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case st >= 200 && st <= 299:
				delWon++
			case !loser(st):
				otherErr = fmt.Sprintf("a racing conditional DeleteObject answered %d", st)
			}
		}()
	}
	close(start)
	wg.Wait()
	if otherErr != "" {
		return Finding{}, fmt.Errorf("probe: %s", otherErr)
	}
	if cur, err = p.head(ctx, key); err != nil {
		return Finding{}, err
	}
	switch {
	case putWon == 1 && delWon == 0 && precondition.Normalize(cur) == precondition.Normalize(winner):
	case putWon == 0 && delWon >= 1 && cur == "":
	default:
		return notHonoured("%d conditional overwrites and %d conditional deletes of one version succeeded concurrently (object now %q): a delete's condition is not checked atomically with the delete", putWon, delWon, cur), nil
	}
	return Finding{Honoured: true}, nil
}

// deleteObjects: an entry with a wrong <ETag> must fail alone and leave its
// object; with the right one the object is deleted.
func (p *condProbe) deleteObjects(ctx context.Context) (Finding, error) {
	key, other := p.key("delete-objects"), p.key("delete-objects-other")
	etag, err := p.put(ctx, key, "fencegate DeleteObjects probe")
	if err != nil {
		return Finding{}, err
	}
	if _, err := p.put(ctx, other, "fencegate DeleteObjects probe, unconditioned"); err != nil {
		return Finding{}, err
	}
	del := func(objs ...types.ObjectIdentifier) (*awss3.DeleteObjectsOutput, error) {
		return p.c.DeleteObjects(ctx, &awss3.DeleteObjectsInput{Bucket: aws.String(p.bucket), Delete: &types.Delete{Objects: objs}})
	}
	out, err := del(types.ObjectIdentifier{Key: aws.String(key), ETag: aws.String(wrongETag)}, types.ObjectIdentifier{Key: aws.String(other)})
	if st := status(err); st != 0 {
		return notHonoured("a DeleteObjects with an <ETag> answered %d", st), nil
	} else if err != nil {
		return Finding{}, fmt.Errorf("probe DeleteObjects: %w", err)
	}
	refused := false
	for _, e := range out.Errors {
		if aws.ToString(e.Key) == key {
			refused = true
		}
	}
	cur, err := p.head(ctx, key)
	if err != nil {
		return Finding{}, err
	}
	switch {
	case cur == "":
		return notHonoured("a DeleteObjects entry with a wrong <ETag> deleted its object: the condition is ignored"), nil
	case !refused:
		return notHonoured("a DeleteObjects entry with a wrong <ETag> was neither deleted nor reported as an <Error>"), nil
	}
	if o, err := p.head(ctx, other); err != nil {
		return Finding{}, err
	} else if o != "" {
		return notHonoured("a DeleteObjects entry without a condition was not deleted beside one with a wrong <ETag>"), nil
	}
	if out, err = del(types.ObjectIdentifier{Key: aws.String(key), ETag: aws.String(etag)}); err != nil {
		return notHonoured("a DeleteObjects entry with the current <ETag> failed: %v", err), nil
	}
	if len(out.Errors) > 0 {
		return notHonoured("a DeleteObjects entry with the current <ETag> failed: %s", aws.ToString(out.Errors[0].Code)), nil
	}
	if cur, err = p.head(ctx, key); err != nil {
		return Finding{}, err
	} else if cur != "" {
		return notHonoured("a DeleteObjects entry with the current <ETag> left its object"), nil
	}
	return Finding{Honoured: true}, nil
}

// copyDest: If-Match on CopyObject must be checked against the destination,
// not the source (a store applying it to the source passes a copy whose
// If-Match is the source's ETag); If-None-Match: * must refuse an existing
// destination.
func (p *condProbe) copyDest(ctx context.Context) (Finding, error) {
	src, dst, fresh := p.key("copy-source"), p.key("copy-destination"), p.key("copy-fresh")
	srcETag, err := p.put(ctx, src, "fencegate copy probe source")
	if err != nil {
		return Finding{}, err
	}
	dstETag, err := p.put(ctx, dst, "fencegate copy probe destination")
	if err != nil {
		return Finding{}, err
	}
	cp := func(to string, ifMatch, ifNoneMatch *string) int {
		_, err := p.c.CopyObject(ctx, &awss3.CopyObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(to),
			CopySource: aws.String(p.bucket + "/" + src), IfMatch: ifMatch, IfNoneMatch: ifNoneMatch})
		return answered(err, http.StatusOK)
	}
	check := func(what string, st, want int) *Finding {
		if st == -1 {
			return &Finding{Detail: "probe CopyObject failed (" + what + ")"}
		}
		if st != want {
			f := notHonoured("a CopyObject with %s answered %d, want %d", what, st, want)
			return &f
		}
		return nil
	}
	if f := check("If-Match on the source's ETag (not the destination's)", cp(dst, aws.String(srcETag), nil), http.StatusPreconditionFailed); f != nil {
		if cur, _ := p.head(ctx, dst); cur != dstETag {
			f.Detail += " and replaced the destination: the condition is ignored, or applied to the source"
		}
		return *f, nil
	}
	if f := check("If-Match on a wrong ETag", cp(dst, aws.String(wrongETag), nil), http.StatusPreconditionFailed); f != nil {
		return *f, nil
	}
	if f := check("If-Match on the destination's ETag", cp(dst, aws.String(dstETag), nil), http.StatusOK); f != nil {
		return *f, nil
	}
	if cur, err := p.head(ctx, dst); err != nil {
		return Finding{}, err
	} else if cur == dstETag {
		return notHonoured("a CopyObject with If-Match on the destination's ETag answered 200 and left the destination"), nil
	}
	if f := check("If-None-Match: * on an absent destination", cp(fresh, nil, aws.String("*")), http.StatusOK); f != nil {
		return *f, nil
	}
	if f := check("If-None-Match: * on an existing destination", cp(fresh, nil, aws.String("*")), http.StatusPreconditionFailed); f != nil {
		return *f, nil
	}
	return Finding{Honoured: true}, nil
}
