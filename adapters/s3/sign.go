package s3

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// upstreamSigner signs the gateway's requests to S3 with its credentials:
// SigV4 exactly as aws-sdk-go-v2's v4.Signer with DisableURIPathEscaping
// signs them (TestUpstreamSignerMatchesSDK compares the two on every form
// the gateway sends), without its per-request maps, sorts of strings and
// joined copies of the canonical request. It stays because it pays for
// itself in the shipped default (issue 41): with the SDK's signer the
// gateway spends 3.9% more CPU per 4 KiB upload (docs/performance.md,
// "Stand-ins in the shipped default"). To measure again, against a build
// with the SDK's signer (sdksigner.go):
//
//	go build -tags sdksigner -o /tmp/fencegate-sdk ./cmd/fencegate
//	UPLOADBENCH_BEFORE=/tmp/fencegate-sdk bench/upload.sh 8 10 s3   # "before" is the SDK's
//
// Like the SDK it signs every header but Authorization, User-Agent,
// X-Amzn-Trace-Id, Expect and Transfer-Encoding (plus host and a positive
// content-length), and replaces the query with its canonical form, so the
// upstream reads the query the gateway parsed (net/url's reading: pairs it
// cannot parse are dropped, not passed on for the upstream to read its own
// way; the SDK's signer does the same, TestForwardsVerify).
type upstreamSigner struct {
	region string
	key    atomic.Pointer[derivedKey] // the last day's signing key
}

type derivedKey struct {
	secret, date string
	key          []byte
}

// sdkSigned is set in a -tags sdksigner build: New then signs with
// aws-sdk-go-v2's v4.Signer.
var sdkSigned bool

// sdkSign signs as aws-sdk-go-v2's v4.Signer, configured as S3 clients
// configure it (no second escaping of the path).
func sdkSign(region string) func(*http.Request, aws.Credentials, string, time.Time) {
	sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	return func(req *http.Request, creds aws.Credentials, payload string, now time.Time) {
		if err := sdk.SignHTTP(context.Background(), creds, req, payload, "s3", region, now); err != nil {
			panic("s3: aws-sdk-go-v2 signer: " + err.Error()) // it returns no error for a header-signed request
		}
	}
}

// unsignedHeaders are the headers the SDK's signer leaves out
// (v4Internal.IgnoredHeaders), matched on the header map's keys.
var unsignedHeaders = map[string]bool{
	"Authorization": true, "User-Agent": true, "X-Amzn-Trace-Id": true, "Expect": true, "Transfer-Encoding": true,
}

// sign sets X-Amz-Date (and X-Amz-Security-Token for temporary
// credentials) and the Authorization of req for payload (the
// x-amz-content-sha256 value) at now.
func (s *upstreamSigner) sign(req *http.Request, creds aws.Credentials, payload string, now time.Time) {
	now = now.UTC()
	amzDate := now.Format(amzDateFormat)
	date := amzDate[:8]
	h := req.Header
	h["X-Amz-Date"] = append(h["X-Amz-Date"][:0], amzDate)
	if creds.SessionToken != "" {
		h["X-Amz-Security-Token"] = append(h["X-Amz-Security-Token"][:0], creds.SessionToken)
	}
	if req.URL.RawQuery != "" && !canonicalForm(req.URL.RawQuery) {
		q := req.URL.Query()
		for _, vs := range q {
			slices.Sort(vs)
		}
		req.URL.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if p := portOnly(host); p != "" && (p == "80" && strings.EqualFold(req.URL.Scheme, "http") || p == "443" && strings.EqualFold(req.URL.Scheme, "https")) {
		host = stripPort(host)
		req.Host = host
	}

	// Signed header names, lower case, sorted; each names its header map
	// key (and more keys when the map holds case variants of one name).
	type signed struct {
		name, key string
		more      []string
	}
	var nbuf [24]signed
	names := append(nbuf[:0], signed{name: "host"})
	if req.ContentLength > 0 {
		names = append(names, signed{name: "content-length"})
	}
	for k := range h {
		if unsignedHeaders[k] || strings.EqualFold(k, "Content-Length") {
			continue
		}
		lk, ok := lowerNames[k]
		if !ok {
			lk = strings.ToLower(k)
		}
		dup := false
		for i := range names {
			if names[i].name == lk {
				names[i].more, dup = append(names[i].more, k), true
				break
			}
		}
		if !dup {
			names = append(names, signed{name: lk, key: k})
		}
	}
	slices.SortFunc(names, func(a, b signed) int { return strings.Compare(a.name, b.name) })

	// The canonical request, then the string to sign, built in a buffer
	// on the stack and hashed in one call each.
	var buf [2048]byte
	b := buf[:0]
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	b = append(b, req.Method...)
	b = append(b, '\n')
	b = append(b, path...)
	b = append(b, '\n')
	b = append(b, req.URL.RawQuery...)
	b = append(b, '\n')
	for _, n := range names {
		b = append(b, n.name...)
		b = append(b, ':')
		switch n.name {
		case "host":
			b = append(b, stripExcessSpaces(host)...)
		case "content-length":
			b = strconv.AppendInt(b, req.ContentLength, 10)
		default:
			// The SDK gathers case variants in map order; the
			// gateway's maps hold one canonical key per name.
			first := true
			for i := -1; i < len(n.more); i++ {
				k := n.key
				if i >= 0 {
					k = n.more[i]
				}
				for _, v := range h[k] {
					if !first {
						b = append(b, ',')
					}
					first = false
					b = append(b, strings.TrimSpace(stripExcessSpaces(v))...)
				}
			}
		}
		b = append(b, '\n')
	}
	b = append(b, '\n')
	signedAt := len(b)
	for i, n := range names {
		if i > 0 {
			b = append(b, ';')
		}
		b = append(b, n.name...)
	}
	signedEnd := len(b)
	b = append(b, '\n')
	b = append(b, payload...)
	sum := sha256.Sum256(b)

	// Authorization: the signed header names are copied out of the
	// canonical request before the buffer is reused.
	var ab [512]byte
	auth := append(ab[:0], algorithm+" Credential="...)
	auth = append(auth, creds.AccessKeyID...)
	auth = append(auth, '/')
	scopeAt := len(auth)
	auth = appendScope(auth, date, s.region, "s3")
	scopeEnd := len(auth)
	auth = append(auth, ", SignedHeaders="...)
	auth = append(auth, b[signedAt:signedEnd]...)
	auth = append(auth, ", Signature="...)

	sts := append(buf[:0], algorithm+"\n"...)
	sts = append(sts, amzDate...)
	sts = append(sts, '\n')
	sts = append(sts, auth[scopeAt:scopeEnd]...)
	sts = append(sts, '\n')
	sts = hex.AppendEncode(sts, sum[:])
	mac := hmacSHA256Sum(s.signingKey(creds.SecretAccessKey, date), sts)
	auth = hex.AppendEncode(auth, mac[:])
	h["Authorization"] = append(h["Authorization"][:0], string(auth))
}

// canonicalForm reports whether raw is already what the SDK's signer makes
// of it (url.Values.Encode of its parse, values sorted, "+" as "%20"):
// pairs of key=value in sorted order, of unreserved characters only. An
// SDK's PutObject carries such a query (x-id=PutObject).
func canonicalForm(raw string) bool {
	var pk, pv string
	for i, more := 0, true; more; i++ {
		var pair string
		pair, raw, more = strings.Cut(raw, "&")
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" || !unreserved(k) || !unreserved(v) {
			return false
		}
		if i > 0 && (k < pk || k == pk && v < pv) {
			return false
		}
		pk, pv = k, v
	}
	return true
}

func unreserved(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~') {
			return false
		}
	}
	return true
}

// lowerNames are the lower-case names of the headers the gateway forwards
// most, spared a strings.ToLower each.
var lowerNames = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Accept-Encoding", "Amz-Sdk-Invocation-Id", "Amz-Sdk-Request", "Cache-Control",
		"Content-Disposition", "Content-Encoding", "Content-Md5", "Content-Type", "If-Match", "If-None-Match",
		"Traceparent", "Tracestate", "X-Amz-Checksum-Crc32", "X-Amz-Checksum-Crc32c", "X-Amz-Checksum-Crc64nvme",
		"X-Amz-Checksum-Sha1", "X-Amz-Checksum-Sha256", "X-Amz-Content-Sha256", "X-Amz-Copy-Source", "X-Amz-Date",
		"X-Amz-Decoded-Content-Length", "X-Amz-Meta-Fencing-Token", "X-Amz-Metadata-Directive", "X-Amz-Sdk-Checksum-Algorithm",
		"X-Amz-Security-Token", "X-Amz-Trailer", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		m[k] = strings.ToLower(k)
	}
	return m
}()

// signingKey is the gateway's signing key of date, derived once a day (and
// again when the credentials rotate).
func (s *upstreamSigner) signingKey(secret, date string) []byte {
	if k := s.key.Load(); k != nil && k.secret == secret && k.date == date {
		return k.key
	}
	k := &derivedKey{secret: secret, date: date, key: signingKey(secret, date, s.region, "s3")}
	s.key.Store(k)
	return k.key
}

// stripExcessSpaces is the SDK's v4Internal.StripExcessSpaces: leading and
// trailing spaces removed, inner runs of spaces folded to one (spaces only;
// the caller trims other white space).
func stripExcessSpaces(str string) string {
	j := len(str) - 1
	for j >= 0 && str[j] == ' ' {
		j--
	}
	k := 0
	for k < j && str[k] == ' ' {
		k++
	}
	str = str[k : j+1]
	if !strings.Contains(str, "  ") {
		return str
	}
	buf := []byte(str)
	m, spaces := 0, 0
	for _, c := range buf {
		if c == ' ' {
			if spaces == 0 {
				buf[m] = c
				m++
			}
			spaces++
			continue
		}
		spaces = 0
		buf[m] = c
		m++
	}
	return string(buf[:m])
}

// portOnly and stripPort are the SDK's (net/url's of Go 1.8) reading of a
// host:port.
func portOnly(hostport string) string {
	colon := strings.IndexByte(hostport, ':')
	if colon == -1 {
		return ""
	}
	if i := strings.Index(hostport, "]:"); i != -1 {
		return hostport[i+len("]:"):]
	}
	if strings.Contains(hostport, "]") {
		return ""
	}
	return hostport[colon+len(":"):]
}

func stripPort(hostport string) string {
	colon := strings.IndexByte(hostport, ':')
	if colon == -1 {
		return hostport
	}
	if i := strings.IndexByte(hostport, ']'); i != -1 {
		return strings.TrimPrefix(hostport[:i], "[")
	}
	return hostport[:colon]
}
