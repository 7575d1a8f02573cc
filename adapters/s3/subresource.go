package s3

import (
	"net/http"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/resource"
)

// A write's query names the operation: the store routes a request by the
// sub-resources its query has (VersityGW: fasthttp's QueryArgs().Has, case
// sensitive, every pair kept; S3 and other stores their own way). Where two
// readings of one query could differ (a name in another case, a name sent
// twice, a pair net/url drops but another parser keeps), the gateway would
// fence one operation while the store runs another. So a write's query is
// checked against an explicit table of the operations S3 defines and the
// names each takes; what is not in the table is refused, in S3's error
// format, before any fence is touched (docs/s3.md, "How requests are
// classified").

// checkWrite refuses a write whose query or conditions the stores could
// read otherwise than the gateway (checkWriteQuery,
// checkConditionHeaders). Reads are not checked: they change nothing.
func checkWrite(r *http.Request, t target) *s3Error {
	if fencegate.ReadMethod(r.Method) {
		return nil
	}
	if err := checkWriteQuery(r.Method, t, r.URL.RawQuery); err != nil {
		return err
	}
	return checkConditionHeaders(r.Header)
}

// writeOp is one row of the table: the sub-resources that name the
// operation (all required) and the parameters it may carry besides.
type writeOp struct {
	name     string
	method   string
	bucket   bool     // a bucket request (no key); else an object request
	names    []string // required
	optional []string
}

// bucketSubresources are the bucket configuration sub-resources S3
// defines for PUT and DELETE (each op is one of them alone, with the
// configuration's id where S3 has several per bucket).
var bucketSubresources = []string{
	"accelerate", "acl", "analytics", "cors", "encryption", "intelligent-tiering",
	"inventory", "lifecycle", "logging", "metadataConfiguration", "metadataTable",
	"metrics", "notification", "object-lock", "ownershipControls", "policy",
	"publicAccessBlock", "replication", "requestPayment", "tagging", "versioning", "website",
}

var writeOps = func() []writeOp {
	v := []string{"versionId"}
	ops := []writeOp{
		{name: "PutObject", method: http.MethodPut},
		{name: "PutObjectTagging", method: http.MethodPut, names: []string{"tagging"}, optional: v},
		{name: "PutObjectAcl", method: http.MethodPut, names: []string{"acl"}, optional: v},
		{name: "PutObjectRetention", method: http.MethodPut, names: []string{"retention"}, optional: v},
		{name: "PutObjectLegalHold", method: http.MethodPut, names: []string{"legal-hold"}, optional: v},
		{name: "UploadPart", method: http.MethodPut, names: []string{"uploadId", "partNumber"}},
		{name: "CreateMultipartUpload", method: http.MethodPost, names: []string{"uploads"}},
		{name: "CompleteMultipartUpload", method: http.MethodPost, names: []string{"uploadId"}},
		{name: "RestoreObject", method: http.MethodPost, names: []string{"restore"}, optional: v},
		{name: "SelectObjectContent", method: http.MethodPost, names: []string{"select", "select-type"}},
		{name: "DeleteObject", method: http.MethodDelete, optional: v},
		{name: "DeleteObjectTagging", method: http.MethodDelete, names: []string{"tagging"}, optional: v},
		{name: "AbortMultipartUpload", method: http.MethodDelete, names: []string{"uploadId"}},
		{name: "CreateBucket", method: http.MethodPut, bucket: true},
		{name: "DeleteBucket", method: http.MethodDelete, bucket: true},
		{name: "DeleteObjects", method: http.MethodPost, bucket: true, names: []string{"delete"}},
	}
	for _, s := range bucketSubresources {
		for _, m := range []string{http.MethodPut, http.MethodDelete} {
			ops = append(ops, writeOp{name: m + " ?" + s, method: m, bucket: true, names: []string{s}, optional: []string{"id"}})
		}
	}
	return ops
}()

// presignParams are the query parameters of a presigned URL's
// authentication (removed before the forward, upstreamQuery).
var presignParams = []string{
	"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
	"X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token",
}

// queryRules are every parameter name of the table as
// resource.ParseQuery takes them: a sub-resource is a flag (its value may
// be empty, ?uploads), every other parameter needs a value (an empty
// versionId= or uploadId= is no value for one store and a value for
// another), partNumber a number. Other names are left to the table, which
// refuses them as a write it does not know.
var queryRules = func() *resource.QueryRules {
	r := &resource.QueryRules{Params: map[string]resource.ParamRule{"x-id": resource.ParamText}, OtherNames: true, EncodedNames: true}
	values := map[string]resource.ParamRule{"uploadId": resource.ParamText, "partNumber": resource.ParamInteger,
		"select-type": resource.ParamText, "versionId": resource.ParamText, "id": resource.ParamText}
	for _, op := range writeOps {
		for _, n := range append(append([]string(nil), op.names...), op.optional...) {
			rule, ok := values[n]
			if !ok {
				rule = resource.ParamFlag
			}
			r.Params[n] = rule
		}
	}
	for _, n := range presignParams {
		r.Params[n] = resource.ParamText
	}
	return r
}()

// checkWriteQuery refuses a write whose query does not name exactly one
// operation of the table, spelled as S3 spells it: a query every store
// reads alike (resource.ParseQuery: no empty pair or ';', valid
// percent-encoding, each name once in any case and in S3's case, a value
// where one is due), and the set of names that of one operation (its
// sub-resources, its optional parameters, x-id, a presigned URL's
// authentication). Reads are not checked: they change nothing.
func checkWriteQuery(method string, t target, raw string) *s3Error {
	if t.bucket == "" {
		return nil // the service: no write is defined there; the store answers
	}
	q, err := resource.ParseQuery(raw, queryRules)
	if err != nil {
		return errInvalidArgument("the query of a write is refused: " + err.Error())
	}
	seen := make(map[string]bool, len(q))
	for _, p := range q {
		seen[strings.ToLower(p.Name)] = true
	}
	for _, op := range writeOps {
		if op.method == method && op.bucket == (t.key == "") && op.matches(seen) {
			return nil
		}
	}
	level := "an object"
	if t.key == "" {
		level = "a bucket"
	}
	return errNotImplemented(method + " on " + level + " with this query is not an S3 write the gateway knows; it refuses what it cannot classify")
}

// matches reports whether the query's names (seen, in lower case) are
// exactly op's sub-resources plus some of its optional parameters, x-id
// and presigned-URL authentication.
func (op writeOp) matches(seen map[string]bool) bool {
	for _, n := range op.names {
		if !seen[strings.ToLower(n)] {
			return false
		}
	}
	for n := range seen {
		if n == "x-id" || isPresignParam(n) || containsFold(op.names, n) || containsFold(op.optional, n) {
			continue
		}
		return false
	}
	return true
}

func isPresignParam(lower string) bool { return containsFold(presignParams, lower) }

func containsFold(list []string, s string) bool {
	for _, e := range list {
		if strings.EqualFold(e, s) {
			return true
		}
	}
	return false
}

// conditionHeaders are the worker's conditional headers on a write. An
// empty one has no meaning the stores agree on (one reads it as absent,
// another as a condition that fails or holds), and the gateway decides
// whether to add its own condition from the worker's: it is refused.
var conditionHeaders = []string{
	"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since",
	"X-Amz-If-Match-Size", "X-Amz-If-Match-Last-Modified-Time",
	"X-Amz-Copy-Source-If-Match", "X-Amz-Copy-Source-If-None-Match",
	"X-Amz-Copy-Source-If-Modified-Since", "X-Amz-Copy-Source-If-Unmodified-Since",
}

// checkConditionHeaders refuses a write with an empty conditional header.
func checkConditionHeaders(h http.Header) *s3Error {
	for _, name := range conditionHeaders {
		for _, v := range h[name] {
			if strings.TrimSpace(v) == "" {
				return errInvalidArgument("the conditional header " + name + " is empty; send a value or leave the header out")
			}
		}
	}
	return nil
}

// settingsWrite reports whether a write changes an object's settings
// (tags, ACL, retention, legal hold, a restored copy) rather than its
// content. A store with a file-system backend (VersityGW posix) resolves
// such a write's key as a path, so "K/" and "K" are one file: tagging
// "K/" tags "K", and the other way round (TestS3TrailingSlashSettings).
func settingsWrite(r *http.Request, t target) bool {
	if t.key == "" {
		return false
	}
	raw := r.URL.RawQuery
	switch r.Method {
	case http.MethodPut:
		return queryHas(raw, "tagging") || queryHas(raw, "acl") || queryHas(raw, "retention") || queryHas(raw, "legal-hold")
	case http.MethodDelete:
		return queryHas(raw, "tagging")
	case http.MethodPost:
		return queryHas(raw, "restore")
	}
	return false
}

// slashTwin is the key a store that folds a trailing slash reads as the
// same object: "K/" for "K", "K" for "K/".
func slashTwin(key string) string {
	if k, ok := strings.CutSuffix(key, "/"); ok {
		return k
	}
	return key + "/"
}
