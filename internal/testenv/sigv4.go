package testenv

// The one AWS Signature Version 4 signer of the tests, written from AWS's
// specification apart from adapters/s3's verifier and re-signer, so tests
// never check that code against itself.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SigV4Key derives the signing key of secret for day (YYYYMMDD), region and
// service: HMAC chained over "AWS4"+secret, day, region, service,
// "aws4_request".
func SigV4Key(secret, day, region, service string) []byte {
	k := []byte("AWS4" + secret)
	for _, s := range []string{day, region, service, "aws4_request"} {
		k = hmacSHA256(k, s)
	}
	return k
}

// SHA256Hex is the lowercase hex SHA-256 of b, SigV4's payload hash.
func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// ChunkChain signs an aws-chunked body per AWS's spec ("Signature
// calculations for the Authorization header: transferring payload in
// multiple chunks", and its trailing-header variant): each signature chains
// from the one before, starting at the seed (the request's own signature).
type ChunkChain struct {
	Key     []byte // the s3 signing key of the secret for the day and region
	AmzDate string // YYYYMMDDTHHMMSSZ
	Scope   string // day/region/s3/aws4_request
	Prev    string // the last signature of the chain
}

// NewChunkChain starts a chain for secret at time now in region, seeded
// with seed.
func NewChunkChain(secret string, now time.Time, region, seed string) *ChunkChain {
	now = now.UTC()
	day := now.Format("20060102")
	return &ChunkChain{
		Key:     SigV4Key(secret, day, region, "s3"),
		AmzDate: now.Format("20060102T150405Z"),
		Scope:   day + "/" + region + "/s3/aws4_request",
		Prev:    seed,
	}
}

// Next signs the string to sign of the given kind (the algorithm line) and
// hash lines, and makes that signature the chain's last.
func (c *ChunkChain) Next(kind, hash string) string {
	c.Prev = hex.EncodeToString(hmacSHA256(c.Key, kind+"\n"+c.AmzDate+"\n"+c.Scope+"\n"+c.Prev+"\n"+hash))
	return c.Prev
}

// Chunk signs one data chunk (the final chunk is the empty one).
func (c *ChunkChain) Chunk(data []byte) string {
	return c.Next("AWS4-HMAC-SHA256-PAYLOAD", SHA256Hex(nil)+"\n"+SHA256Hex(data))
}

// Trailer signs the trailing headers, trailer being "name:value" (the
// canonical form signed is trailer+"\n").
func (c *ChunkChain) Trailer(trailer string) string {
	return c.Next("AWS4-HMAC-SHA256-TRAILER", SHA256Hex([]byte(trailer+"\n")))
}

// SignV4 signs req for service s3 with the access key access and its secret
// (AWS Signature Version 4, header form), with body as the signed payload.
// Only what test requests need: no query-string signing of exotic values.
func SignV4(req *http.Request, body []byte, access, secret, region string, now time.Time) {
	now = now.UTC()
	amzDate := now.Format("20060102T150405Z")
	day := now.Format("20060102")
	payload := SHA256Hex(body)
	req.Header.Set("X-Amz-Date", amzDate)
	req.Header.Set("X-Amz-Content-Sha256", payload)
	req.Header.Set("Host", req.URL.Host)

	names := []string{"host", "x-amz-content-sha256", "x-amz-date"}
	if req.ContentLength > 0 {
		req.Header.Set("Content-Length", strconv.FormatInt(req.ContentLength, 10))
	}
	sort.Strings(names)
	var canonHeaders strings.Builder
	for _, n := range names {
		v := req.Header.Get(n)
		if n == "host" {
			v = req.URL.Host
		}
		canonHeaders.WriteString(n + ":" + strings.TrimSpace(v) + "\n")
	}
	signed := strings.Join(names, ";")
	q := req.URL.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var cq []string
	for _, k := range keys {
		for _, v := range q[k] {
			cq = append(cq, awsEscape(k)+"="+awsEscape(v))
		}
	}
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	canon := strings.Join([]string{req.Method, path, strings.Join(cq, "&"), canonHeaders.String(), signed, payload}, "\n")
	scope := day + "/" + region + "/s3/aws4_request"
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + SHA256Hex([]byte(canon))
	sig := hex.EncodeToString(hmacSHA256(SigV4Key(secret, day, region, "s3"), toSign))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+access+"/"+scope+", SignedHeaders="+signed+", Signature="+sig)
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// awsEscape is RFC 3986 percent-encoding of everything but unreserved characters.
func awsEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
