package s3

import (
	"net/textproto"
	"net/url"
	"testing"
)

// The canonical query's fast path (a query already in canonical form is
// its own canonical query) gives what the general encoding gives.
func TestCanonicalQueryFastPath(t *testing.T) {
	for _, raw := range []string{
		"", "x-id=PutObject", "a=1&b=2", "b=2&a=1", "a=2&a=1", "a=1&a=2", "a=&b=", "uploads", "a=1&&b=2", "a=b=c",
		"a=%20", "a=+", "a=~._-", "A=1&a=1", "a=1&A=1", "=1", "a=1;b=2", "ab=1&a=2", "a=2&ab=1", "a-b=1&a=2",
		"partNumber=1&uploadId=abc", "uploadId=abc&partNumber=1", "X-Amz-Signature=00&a=1", "a=1&X-Amz-Signature=00",
		"list-type=2&prefix=a%2Fb", "delete=", "delete", "a=1&", "&a=1", "&", "x-id=PutObject&",
	} {
		for _, presigned := range []bool{false, true} {
			if got, want := string(appendCanonicalQuery(nil, raw, presigned, false)), canonicalQuery(raw, presigned, false); got != want {
				t.Errorf("%q (presigned %v): %q, want %q", raw, presigned, got, want)
			}
		}
	}
}

// queryHas answers as url.ParseQuery(raw).Has(name) does, for the forms a
// client may send (the classification of a request must not differ from
// the parse the upstream request's signed query is made of).
func TestQueryHas(t *testing.T) {
	raws := []string{
		"", "uploads", "uploads=", "uploadId=1", "x-id=PutObject&uploadId=2", "a=1&&uploadId", "uploadId;x=1",
		"x=1;uploadId", "upload%49d=1", "uploadI%64=1", "upload+Id=1", "upload%20Id=1", "uploadId=%zz", "uploadId=%",
		"%zz=1&uploadId=1", "uploadId%=1", "=uploadId", "uploadId=a=b", "acl", "tagging=&x=1", "x=1&tagging",
		"partNumber=1&uploadId=abc", "delete", "delete=&x=%", "UPLOADID=1", "uploadId&uploadId", "uploadid=1",
		"X-Amz-Signature=00", "X-Amz-Signature", "x-amz-signature=1", "X%2DAmz-Signature=1",
	}
	names := []string{"uploadId", "partNumber", "uploads", "acl", "tagging", "delete", "X-Amz-Signature", "upload Id", ""}
	for _, raw := range raws {
		q, _ := url.ParseQuery(raw)
		for _, n := range names {
			if got, want := queryHas(raw, n), q.Has(n); got != want {
				t.Errorf("queryHas(%q, %q) = %v; url.ParseQuery says %v", raw, n, got, want)
			}
		}
	}
}

func FuzzQueryHas(f *testing.F) {
	f.Add("uploadId=1&x=%zz", "uploadId")
	f.Add("a+b=1;c", "a b")
	f.Fuzz(func(t *testing.T, raw, name string) {
		q, _ := url.ParseQuery(raw)
		if got, want := queryHas(raw, name), q.Has(name); got != want {
			t.Errorf("queryHas(%q, %q) = %v; url.ParseQuery says %v", raw, name, got, want)
		}
	})
}

// headerKey finds the header map key http.Header.Values would.
func TestHeaderKey(t *testing.T) {
	for l := range canonicalKeys {
		if got, want := headerKey(l), textproto.CanonicalMIMEHeaderKey(l); got != want {
			t.Errorf("headerKey(%q) = %q; want %q", l, got, want)
		}
	}
	for _, l := range []string{"x-amz-meta-other", "content-length", "host", "x-custom-1"} {
		if got, want := headerKey(l), textproto.CanonicalMIMEHeaderKey(l); got != want {
			t.Errorf("headerKey(%q) = %q; want %q", l, got, want)
		}
	}
}
