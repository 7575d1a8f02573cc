package azure

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// Shared Key authorization, as the Blob service defines it
// (https://learn.microsoft.com/rest/api/storageservices/authorize-with-shared-key):
// an HMAC-SHA256, keyed with the account key, of the method, the standard
// headers, the x-ms-* headers and the account-qualified resource. The
// gateway verifies workers' requests with their own keys and signs its
// forwards with the store account's, with one implementation for both
// (azblob keeps its own unexported). Tests check it against the SDKs'
// signatures and the emulator's verification.

// maxClockSkew is how far a worker's x-ms-date (or Date) may be from the
// gateway's clock; the service allows 15 minutes.
const maxClockSkew = 15 * time.Minute

// stringToSign is the Shared Key string of a request to path (escaped, as
// on the wire) with query rawQuery, for account, its x-ms-* headers in
// order.
func stringToSign(account, method, escapedPath, rawQuery string, h http.Header, contentLength int64, order headerOrder) (string, error) {
	cl := h.Get("Content-Length")
	if contentLength > 0 {
		cl = fmt.Sprint(contentLength)
	}
	if cl == "0" {
		cl = ""
	}
	res, err := canonicalResource(account, escapedPath, rawQuery)
	if err != nil {
		return "", err
	}
	date := ""
	if h.Get("X-Ms-Date") == "" {
		// With x-ms-date the Date field is empty (the service and the SDKs
		// sign it so, whatever Date says).
		date = h.Get("Date")
	}
	return strings.Join([]string{
		method,
		h.Get("Content-Encoding"),
		h.Get("Content-Language"),
		cl,
		h.Get("Content-Md5"),
		h.Get("Content-Type"),
		date,
		h.Get("If-Modified-Since"),
		h.Get("If-Match"),
		h.Get("If-None-Match"),
		h.Get("If-Unmodified-Since"),
		h.Get("Range"),
		canonicalHeaders(h, order) + res,
	}, "\n"), nil
}

// headerOrder is how a signer sorts the canonicalized x-ms-* headers.
// The service compares names with a culture-aware, weighted comparison
// (hyphens and apostrophes skipped at the first level, case ignored, '_'
// before digits before letters), which azblob reproduces (compareHeaders);
// other signers, following the REST documentation's "sorted", sort by
// bytes. The two differ for metadata names such as a_b beside a1, or a-b
// beside a_b, so the gateway accepts either and signs its forwards in the
// service's.
type headerOrder int

const (
	orderService headerOrder = iota // the service's weighted comparison
	orderBytes                      // byte order
)

// canonicalHeaders is the x-ms-* headers, lower case, sorted in order,
// each "name:value\n".
func canonicalHeaders(h http.Header, order headerOrder) string {
	// The map's own keys: a request built in code may hold names that
	// are not in canonical form, which h.Values would not find.
	values := map[string][]string{}
	var names []string
	for k, vs := range h {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-ms-") {
			if _, ok := values[lk]; !ok {
				names = append(names, lk)
			}
			values[lk] = append(values[lk], vs...)
		}
	}
	if order == orderService {
		sort.Slice(names, func(i, j int) bool {
			if c := compareHeaders(names[i], names[j]); c != 0 {
				return c < 0
			}
			return names[i] < names[j] // a tie only names outside header syntax make
		})
	} else {
		sort.Strings(names)
	}
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte(':')
		b.WriteString(strings.Join(values[n], ","))
		b.WriteByte('\n')
	}
	return b.String()
}

// canonicalResource is "/account/path" and the query parameters, names in
// lower case and sorted, each on its own line with its sorted values
// joined by ",".
func canonicalResource(account, escapedPath, rawQuery string) (string, error) {
	if escapedPath == "" {
		escapedPath = "/"
	}
	var b strings.Builder
	b.WriteString("/" + account + escapedPath)
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(q))
	byName := map[string][]string{}
	for k, vs := range q {
		lk := strings.ToLower(k)
		if _, ok := byName[lk]; !ok {
			names = append(names, lk)
		}
		byName[lk] = append(byName[lk], vs...)
	}
	sort.Strings(names)
	for _, n := range names {
		vs := byName[n]
		sort.Strings(vs)
		b.WriteString("\n" + n + ":" + strings.Join(vs, ","))
	}
	return b.String(), nil
}

// sharedKey is an account's name and decoded key.
type sharedKey struct {
	account string
	key     []byte
}

func newSharedKey(account, b64 string) (*sharedKey, error) {
	k, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(k) == 0 || account == "" {
		return nil, errors.New("an account name and a base64 key")
	}
	return &sharedKey{account: account, key: k}, nil
}

// mac is the base64 HMAC-SHA256 of s.
func (k *sharedKey) mac(s string) string {
	m := hmac.New(sha256.New, k.key)
	m.Write([]byte(s))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

var (
	errNoSharedKey  = errors.New("no Shared Key authorization")
	errUnknownKey   = errors.New("unknown account")
	errBadSignature = errors.New("signature does not match")
	errStale        = errors.New("x-ms-date is missing or more than 15 minutes from the gateway's clock")
)

// verify checks a worker's Shared Key authorization against the keys of
// the route's clients and returns the worker's account name.
func verify(r *http.Request, clients map[string]*sharedKey, now time.Time) (string, error) {
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "SharedKey ")
	if !ok {
		return "", errNoSharedKey
	}
	account, sig, ok := strings.Cut(rest, ":")
	if !ok || account == "" || sig == "" {
		return "", errNoSharedKey
	}
	cred := clients[account]
	if cred == nil {
		return "", errUnknownKey
	}
	d := r.Header.Get("X-Ms-Date")
	if d == "" {
		d = r.Header.Get("Date")
	}
	at, err := http.ParseTime(d)
	if err != nil || at.Sub(now) > maxClockSkew || now.Sub(at) > maxClockSkew {
		return "", errStale
	}
	// The length the worker signed is the body's, which the gateway
	// forwards unchanged.
	for _, order := range []headerOrder{orderService, orderBytes} {
		if order == orderBytes && canonicalHeaders(r.Header, orderBytes) == canonicalHeaders(r.Header, orderService) {
			break
		}
		s, err := stringToSign(account, r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header, r.ContentLength, order)
		if err != nil {
			return "", errBadSignature
		}
		if hmac.Equal([]byte(cred.mac(s)), []byte(sig)) {
			return account, nil
		}
	}
	return "", errBadSignature
}

// sign sets the gateway's x-ms-date and Shared Key authorization on an
// outbound request.
func sign(req *http.Request, cred *sharedKey, now time.Time) error {
	req.Header.Set("X-Ms-Date", now.UTC().Format(http.TimeFormat))
	req.Header.Del("Date")
	req.Header.Del("Authorization")
	// The service's order: what Azure itself verifies with.
	s, err := stringToSign(cred.account, req.Method, req.URL.EscapedPath(), req.URL.RawQuery, req.Header, req.ContentLength, orderService)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "SharedKey "+cred.account+":"+cred.mac(s))
	return nil
}

// b64 is the key as configured.
func (k *sharedKey) b64() string { return base64.StdEncoding.EncodeToString(k.key) }
