package s3

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SigV4 verification of the workers' requests. The algorithm is AWS's
// "Signature Version 4" as S3 applies it: the canonical URI is the path as
// sent (S3 does not normalise or double-encode it), the payload hash is the
// x-amz-content-sha256 header (UNSIGNED-PAYLOAD for presigned URLs).
//
// Re-signing upstream uses aws-sdk-go-v2's signer; verification is written
// out here because it must check exactly the headers the worker chose to
// sign, which the SDK's signer (signing whatever is present) cannot do.

const (
	algorithm       = "AWS4-HMAC-SHA256"
	amzDateFormat   = "20060102T150405Z"
	unsignedPayload = "UNSIGNED-PAYLOAD"
	// Streaming (aws-chunked) payloads, x-amz-content-sha256 values.
	streamingSigned        = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	streamingSignedTrailer = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	streamingUnsigned      = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	emptySHA256            = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

	// maxSkew is S3's own limit on the difference between the request's
	// signing time and the server's clock.
	maxSkew = 15 * time.Minute
	// maxPresignExpiry is S3's limit on X-Amz-Expires (seven days).
	maxPresignExpiry = 7 * 24 * time.Hour
)

// authRequest is a parsed SigV4 signature of one request.
type authRequest struct {
	accessKey     string
	date          string // scope date, YYYYMMDD
	region        string
	service       string
	signedHeaders []string
	signature     string
	amzDate       time.Time
	amzDateRaw    string
	presigned     bool
	expires       time.Duration
	payloadHash   string
}

func (a *authRequest) scope() string {
	return a.date + "/" + a.region + "/" + a.service + "/aws4_request"
}

// parseAuth extracts the signature from the Authorization header or, for a
// presigned URL, from the query. It checks form only; verify checks the
// signature itself.
func parseAuth(r *http.Request, now time.Time) (*authRequest, *s3Error) {
	a := &authRequest{}
	q := r.URL.Query()
	h := r.Header.Get("Authorization")
	switch {
	case h != "":
		if q.Has("X-Amz-Signature") {
			return nil, errInvalidArgument("only one auth mechanism allowed")
		}
		rest, ok := strings.CutPrefix(h, algorithm+" ")
		if !ok {
			if strings.HasPrefix(h, "AWS ") {
				return nil, errAccessDenied("signature version 2 is not supported; use SigV4")
			}
			return nil, errAuthMalformed("unsupported authorization algorithm")
		}
		var cred, signed string
		for _, part := range strings.Split(rest, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok {
				return nil, errAuthMalformed("malformed authorization header")
			}
			switch k {
			case "Credential":
				cred = v
			case "SignedHeaders":
				signed = v
			case "Signature":
				a.signature = v
			default:
				return nil, errAuthMalformed("unknown authorization field " + k)
			}
		}
		if err := a.setCredential(cred, signed); err != nil {
			return nil, err
		}
		a.amzDateRaw = r.Header.Get("X-Amz-Date")
		a.payloadHash = r.Header.Get("X-Amz-Content-Sha256")
		if a.payloadHash == "" {
			return nil, errInvalidRequest("missing required header for this request: x-amz-content-sha256")
		}
	case q.Has("X-Amz-Signature"):
		a.presigned = true
		if q.Get("X-Amz-Algorithm") != algorithm {
			return nil, errAuthMalformed("unsupported X-Amz-Algorithm")
		}
		if err := a.setCredential(q.Get("X-Amz-Credential"), q.Get("X-Amz-SignedHeaders")); err != nil {
			return nil, err
		}
		a.signature = q.Get("X-Amz-Signature")
		a.amzDateRaw = q.Get("X-Amz-Date")
		secs, err := strconv.Atoi(q.Get("X-Amz-Expires"))
		if err != nil || secs < 0 || time.Duration(secs)*time.Second > maxPresignExpiry {
			return nil, errAuthMalformed("X-Amz-Expires must be a number of seconds up to 604800")
		}
		a.expires = time.Duration(secs) * time.Second
		a.payloadHash = unsignedPayload
		if v := r.Header.Get("X-Amz-Content-Sha256"); v != "" {
			a.payloadHash = v
		}
	default:
		return nil, errAccessDenied("request is not signed: the gateway accepts SigV4-signed requests only")
	}
	if len(a.signature) != 64 || !isHex(a.signature) {
		return nil, errAuthMalformed("malformed signature")
	}
	t, err := time.Parse(amzDateFormat, a.amzDateRaw)
	if err != nil {
		return nil, errAccessDenied("X-Amz-Date is missing or malformed")
	}
	a.amzDate = t
	if a.amzDateRaw[:8] != a.date {
		return nil, errAuthMalformed("credential scope date does not match X-Amz-Date")
	}
	if a.presigned {
		if now.Before(t.Add(-maxSkew)) {
			return nil, errRequestTimeTooSkewed()
		}
		if now.After(t.Add(a.expires)) {
			return nil, errAccessDenied("request has expired")
		}
	} else if d := now.Sub(t); d > maxSkew || d < -maxSkew {
		return nil, errRequestTimeTooSkewed()
	}
	if a.service != "s3" {
		return nil, errAuthMalformed("credential scope service must be s3")
	}
	return a, nil
}

func (a *authRequest) setCredential(cred, signed string) *s3Error {
	parts := strings.Split(cred, "/")
	if len(parts) != 5 || parts[4] != "aws4_request" || parts[0] == "" || len(parts[1]) != 8 {
		return errAuthMalformed("malformed credential scope")
	}
	a.accessKey, a.date, a.region, a.service = parts[0], parts[1], parts[2], parts[3]
	if signed == "" {
		return errAuthMalformed("SignedHeaders is empty")
	}
	a.signedHeaders = strings.Split(signed, ";")
	hasHost := false
	for i, h := range a.signedHeaders {
		if h == "" || h != strings.ToLower(h) || (i > 0 && a.signedHeaders[i-1] >= h) {
			return errAuthMalformed("SignedHeaders must be lower case, sorted and unique")
		}
		hasHost = hasHost || h == "host"
	}
	if !hasHost {
		return errAuthMalformed("SignedHeaders must include host")
	}
	return nil
}

// verify checks the signature against secret and returns the signing key
// (needed to verify chunk signatures of a streaming body).
func (a *authRequest) verify(r *http.Request, secret string) ([]byte, bool) {
	cr := canonicalRequest(r, a)
	sts := stringToSign(a.amzDateRaw, a.scope(), sha256Hex([]byte(cr)))
	key := signingKey(secret, a.date, a.region, a.service)
	want := hex.EncodeToString(hmacSHA256(key, []byte(sts)))
	return key, subtle.ConstantTimeCompare([]byte(want), []byte(a.signature)) == 1
}

func canonicalRequest(r *http.Request, a *authRequest) string {
	var b strings.Builder
	b.WriteString(r.Method)
	b.WriteByte('\n')
	// The path exactly as sent: S3 signs it as the client encoded it.
	b.WriteString(rawPath(r))
	b.WriteByte('\n')
	b.WriteString(canonicalQuery(r.URL.RawQuery, a.presigned))
	b.WriteByte('\n')
	for _, name := range a.signedHeaders {
		b.WriteString(name)
		b.WriteByte(':')
		b.WriteString(headerValue(r, name))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.WriteString(strings.Join(a.signedHeaders, ";"))
	b.WriteByte('\n')
	b.WriteString(a.payloadHash)
	return b.String()
}

// rawPath is the request target's path as received on the wire.
func rawPath(r *http.Request) string {
	p := r.RequestURI
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if p == "" || p[0] != '/' {
		// Absolute-form request targets: fall back to the parsed URL.
		p = r.URL.EscapedPath()
	}
	if p == "" {
		p = "/"
	}
	return p
}

func headerValue(r *http.Request, name string) string {
	var vs []string
	switch name {
	case "host":
		vs = []string{r.Host}
	case "content-length":
		// net/http moves Content-Length out of the header map.
		if r.ContentLength >= 0 {
			vs = []string{strconv.FormatInt(r.ContentLength, 10)}
		}
	case "transfer-encoding":
		vs = r.TransferEncoding
	default:
		vs = r.Header.Values(name)
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strings.Join(strings.Fields(v), " ")
	}
	return strings.Join(out, ",")
}

func canonicalQuery(raw string, presigned bool) string {
	if raw == "" {
		return ""
	}
	type kv struct{ k, v string }
	var pairs []kv
	for _, part := range strings.Split(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		k, v = unescapeQuery(k), unescapeQuery(v)
		if presigned && k == "X-Amz-Signature" {
			continue
		}
		pairs = append(pairs, kv{uriEncode(k, true), uriEncode(v, true)})
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].k != pairs[j].k {
			return pairs[i].k < pairs[j].k
		}
		return pairs[i].v < pairs[j].v
	})
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.k)
		b.WriteByte('=')
		b.WriteString(p.v)
	}
	return b.String()
}

func unescapeQuery(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// uriEncode is SigV4's UriEncode: every byte except unreserved characters
// is percent-encoded with upper-case hex; '/' is kept when encodeSlash is
// false (object keys in paths).
func uriEncode(s string, encodeSlash bool) string {
	const hexUpper = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9',
			c == '-', c == '_', c == '.', c == '~', c == '/' && !encodeSlash:
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexUpper[c>>4])
			b.WriteByte(hexUpper[c&15])
		}
	}
	return b.String()
}

func stringToSign(amzDate, scope, hashedRequest string) string {
	return algorithm + "\n" + amzDate + "\n" + scope + "\n" + hashedRequest
}

func signingKey(secret, date, region, service string) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), []byte(date))
	k = hmacSHA256(k, []byte(region))
	k = hmacSHA256(k, []byte(service))
	return hmacSHA256(k, []byte("aws4_request"))
}

func hmacSHA256(key, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(data)
	return m.Sum(nil)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
