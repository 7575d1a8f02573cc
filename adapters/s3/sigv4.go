package s3

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/textproto"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SigV4 verification of the workers' requests. The algorithm is AWS's
// "Signature Version 4" as S3 applies it: the canonical URI is the path as
// sent (S3 does not normalise or double-encode it), the payload hash is the
// x-amz-content-sha256 header (UNSIGNED-PAYLOAD for presigned URLs).
//
// Re-signing upstream is upstreamSigner's (sign.go), which signs as
// aws-sdk-go-v2's v4.Signer does (TestUpstreamSignerMatchesSDK compares
// them). Verification is written out apart from it because it must check
// exactly the headers the worker chose to sign, which a signer (signing
// every header present but a fixed few) cannot do.

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
	h := r.Header.Get("Authorization")
	switch {
	case h != "":
		if queryHas(r.URL.RawQuery, "X-Amz-Signature") {
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
		for more := true; more; {
			var part string
			part, rest, more = strings.Cut(rest, ",")
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
	case queryHas(r.URL.RawQuery, "X-Amz-Signature"):
		q := r.URL.Query()
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
	// ACCESS/DATE/REGION/SERVICE/aws4_request, five parts exactly.
	var parts [5]string
	rest, n := cred, 0
	for more := true; more; n++ {
		if n == len(parts) {
			return errAuthMalformed("malformed credential scope")
		}
		parts[n], rest, more = strings.Cut(rest, "/")
	}
	if n != 5 || parts[4] != "aws4_request" || parts[0] == "" || len(parts[1]) != 8 {
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

// verify checks the signature with the signing key of the worker's secret
// for the request's scope (keys.get derives it, or has it from an earlier
// request of the same day) and returns that key, which verifies the chunk
// signatures of a streaming body.
//
// The canonical request and the string to sign are built in a buffer on
// the stack and hashed in one call each: no allocation for a request of
// common size (about 35 allocations per request before, most of them
// io.WriteString copies of strings into the hash).
func (a *authRequest) verify(r *http.Request, secret string, keys *keyCache) ([]byte, bool) {
	key, cached := keys.get(secret, a)
	if !a.matches(r, key, formSpec) && !a.matches(r, key, formGoSDK) {
		return nil, false
	}
	if !cached {
		keys.put(secret, a, key)
	}
	return key, true
}

// canonForm is one signer's reading of the canonical request where signers
// differ. The SigV4 specification (and botocore, the AWS CLI) folds every
// run of white space in a signed header's value to one space and sorts the
// query's pairs by their encoded names and values; aws-sdk-go-v2 folds runs
// of spaces only (an inner tab stays) and sorts the pairs by their decoded
// names and values (url.Values.Encode). The two differ only for a value
// with a tab or a Unicode space, or a query whose order changes when
// encoded: rare, but a worker may use either signer, so a signature over
// either form verifies. Both cover the same request: the same header
// values up to white space, the same query pairs.
type canonForm struct {
	spacesOnly bool // fold runs of spaces only, then trim
	rawOrder   bool // sort query pairs by decoded name, then value
}

var (
	formSpec  = canonForm{}
	formGoSDK = canonForm{spacesOnly: true, rawOrder: true}
)

// matches reports whether the request's signature is the HMAC of its
// string to sign in form f under key. The canonical request and the string
// to sign are built in a buffer on the stack and hashed in one call each:
// no allocation for a request of common size.
func (a *authRequest) matches(r *http.Request, key []byte, f canonForm) bool {
	var buf [2048]byte
	sum := sha256.Sum256(appendCanonicalRequest(buf[:0], r, a, f))
	sts := append(buf[:0], algorithm+"\n"...)
	sts = append(sts, a.amzDateRaw...)
	sts = append(sts, '\n')
	sts = appendScope(sts, a.date, a.region, a.service)
	sts = append(sts, '\n')
	sts = hex.AppendEncode(sts, sum[:])
	mac := hmacSHA256Sum(key, sts)
	var want, got [2 * sha256.Size]byte
	hex.Encode(want[:], mac[:])
	if len(a.signature) != len(got) {
		return false
	}
	copy(got[:], a.signature)
	return subtle.ConstantTimeCompare(want[:], got[:]) == 1
}

// foldValue is a header value folded as form f folds it.
func foldValue(v string, f canonForm) string {
	if f.spacesOnly {
		return strings.TrimSpace(stripExcessSpaces(v))
	}
	return strings.Join(strings.Fields(v), " ")
}

// appendScope appends a credential scope, DATE/REGION/SERVICE/aws4_request.
func appendScope(b []byte, date, region, service string) []byte {
	b = append(b, date...)
	b = append(b, '/')
	b = append(b, region...)
	b = append(b, '/')
	b = append(b, service...)
	return append(b, "/aws4_request"...)
}

// appendCanonicalRequest appends SigV4's canonical request of r to b.
func appendCanonicalRequest(b []byte, r *http.Request, a *authRequest, f canonForm) []byte {
	b = append(b, r.Method...)
	b = append(b, '\n')
	// The path exactly as sent: S3 signs it as the client encoded it.
	b = append(b, rawPath(r)...)
	b = append(b, '\n')
	b = appendCanonicalQuery(b, r.URL.RawQuery, a.presigned, f.rawOrder)
	b = append(b, '\n')
	for _, name := range a.signedHeaders {
		b = append(b, name...)
		b = append(b, ':')
		b = appendHeaderValue(b, r, name, f)
		b = append(b, '\n')
	}
	b = append(b, '\n')
	for i, name := range a.signedHeaders {
		if i > 0 {
			b = append(b, ';')
		}
		b = append(b, name...)
	}
	b = append(b, '\n')
	return append(b, a.payloadHash...)
}

// keyCache keeps the signing keys of verified requests: a key is derived
// with four HMACs from the secret and the scope (day, region, service), the
// same for every request of a worker in a day. Only keys that verified a
// signature are kept (an unverified request names any scope it likes), at
// most maxKeys; a full cache starts over.
type keyCache struct {
	mu   sync.Mutex
	keys map[keyScope][]byte
}

type keyScope struct{ secret, date, region, service string }

const maxKeys = 256

// get returns the signing key of secret for a's scope, and whether it
// came from the cache (else it is derived, and put once it verified a
// signature).
func (c *keyCache) get(secret string, a *authRequest) ([]byte, bool) {
	s := keyScope{secret, a.date, a.region, a.service}
	c.mu.Lock()
	k, ok := c.keys[s]
	c.mu.Unlock()
	if ok {
		return k, true
	}
	return signingKey(secret, a.date, a.region, a.service), false
}

func (c *keyCache) put(secret string, a *authRequest, key []byte) {
	s := keyScope{secret, a.date, a.region, a.service}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.keys[s]; ok {
		return
	}
	if c.keys == nil || len(c.keys) >= maxKeys {
		c.keys = make(map[keyScope][]byte)
	}
	c.keys[s] = key
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

// appendHeaderValue appends the canonical value of header name: its values
// joined by commas, each folded as form f folds it.
func appendHeaderValue(b []byte, r *http.Request, name string, f canonForm) []byte {
	var one [1]string
	var vs []string
	switch name {
	case "host":
		one[0], vs = r.Host, one[:]
	case "content-length":
		// net/http moves Content-Length out of the header map.
		if r.ContentLength >= 0 {
			return strconv.AppendInt(b, r.ContentLength, 10)
		}
	case "transfer-encoding":
		vs = r.TransferEncoding
	default:
		vs = r.Header[headerKey(name)]
	}
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		if !needsFolding(v) {
			b = append(b, v...)
			continue
		}
		b = append(b, foldValue(v, f)...)
	}
	return b
}

// headerKey is the header map key of a lower-case header name, as
// http.Header.Values finds it (textproto.CanonicalMIMEHeaderKey), without
// allocating one for the names SDKs sign.
func headerKey(name string) string {
	if k, ok := canonicalKeys[name]; ok {
		return k
	}
	return textproto.CanonicalMIMEHeaderKey(name)
}

// canonicalKeys maps the lower-case names of lowerNames (and the fencing
// token header) back to their header map keys.
var canonicalKeys = func() map[string]string {
	m := map[string]string{"fencing-token": "Fencing-Token"}
	for k, l := range lowerNames {
		m[l] = k
	}
	return m
}()

// needsFolding reports whether strings.Fields would change v joined by
// single spaces: leading or trailing white space, a run of it, or white
// space other than a space.
func needsFolding(v string) bool {
	prevSpace := true
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 0x80 {
			return true // Unicode white space: leave it to strings.Fields
		}
		sp := c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
		if sp && (prevSpace || c != ' ') {
			return true
		}
		prevSpace = sp
	}
	return prevSpace && len(v) > 0
}

// appendCanonicalQuery appends SigV4's canonical query string of raw:
// every pair's key and value decoded and encoded again, sorted by key, then
// value (their decoded forms if rawOrder); X-Amz-Signature left out of a
// presigned URL's.
func appendCanonicalQuery(b []byte, raw string, presigned, rawOrder bool) []byte {
	if raw == "" {
		return b
	}
	if !presigned && canonicalForm(raw) {
		// Pairs of unreserved characters, already sorted (an SDK's
		// x-id=PutObject): encoded and sorted again they are the same.
		return append(b, raw...)
	}
	return append(b, canonicalQuery(raw, presigned, rawOrder)...)
}

func canonicalQuery(raw string, presigned, rawOrder bool) string {
	if raw == "" {
		return ""
	}
	type kv struct{ k, v, rawK, rawV string }
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
		pairs = append(pairs, kv{uriEncode(k, true), uriEncode(v, true), k, v})
	}
	sort.Slice(pairs, func(i, j int) bool {
		if rawOrder {
			if pairs[i].rawK != pairs[j].rawK {
				return pairs[i].rawK < pairs[j].rawK
			}
			return pairs[i].rawV < pairs[j].rawV
		}
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

// hmacSHA256Sum is hmacSHA256 into an array, for the one HMAC per verified
// request and per upstream signature. It is HMAC (RFC 2104) written out
// over sha256.Sum256, which keeps msg where it is: through crypto/hmac's
// hash.Hash the string to sign escaped, and with it the 2 KiB buffer on
// the stack that the verifier and the signer build it in, moved to the
// heap for every request (with hmac.New's own two digests).
func hmacSHA256Sum(key, msg []byte) [sha256.Size]byte {
	const block = sha256.BlockSize
	if len(key) > block {
		k := sha256.Sum256(key)
		key = k[:]
	}
	var ib [block + 448]byte // a string to sign fits
	in := ib[:block]
	if block+len(msg) > len(ib) {
		in = make([]byte, block, block+len(msg))
	}
	var ob [block + sha256.Size]byte
	copy(in, key)
	copy(ob[:], key)
	for i := range block {
		in[i] ^= 0x36
		ob[i] ^= 0x5c
	}
	inner := sha256.Sum256(append(in, msg...))
	copy(ob[block:], inner[:])
	return sha256.Sum256(ob[:])
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
