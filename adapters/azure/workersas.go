package azure

import (
	"crypto/hmac"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Workers may authenticate with an account SAS instead of a Shared Key
// signature: a query string signed with their own key (azure.clients), as
// sas.AccountSignatureValues.SignWithSharedKey makes it. The gateway
// verifies the signature, the validity window, the protocol, the address
// range, the service (b), the resource types and the permissions the
// operation needs, then removes the worker's SAS from the forward, which
// it signs with its own credentials.

// sasParams are an account SAS's query parameters, removed from forwards.
var sasParams = []string{"sv", "ss", "srt", "sp", "st", "se", "sip", "spr", "ses", "sig"}

// minSASVersion is the oldest signed version whose string to sign the
// gateway builds (the one with the encryption scope line).
const minSASVersion = "2020-12-06"

var (
	errSASExpired    = errors.New("the SAS is expired or not yet valid")
	errSASScope      = errors.New("the SAS does not grant this operation (service b, resource type and permissions)")
	errSASForm       = errors.New("not an account SAS the gateway verifies (sv 2020-12-06 or later, ss, srt, sp, se, sig; no ses)")
	errSASProtocol   = errors.New("the SAS allows HTTPS only")
	errSASAddress    = errors.New("the SAS does not allow this client address")
	errSASBadSigning = errors.New("the SAS signature does not match a key of this route's azure.clients")
)

// hasSAS reports whether a request carries a SAS signature.
func hasSAS(q url.Values) bool { return q.Has("sig") }

// verifySAS checks a worker's account SAS and returns the worker's
// account name: the SAS names no account, so each client's key is tried.
func verifySAS(r *http.Request, q url.Values, t target, clients map[string]*sharedKey, now time.Time) (string, error) {
	get := q.Get
	sv, ss, srt, sp, st, se, sip, spr, ses, sig := get("sv"), get("ss"), get("srt"), get("sp"), get("st"), get("se"), get("sip"), get("spr"), get("ses"), get("sig")
	if sv < minSASVersion || ss == "" || srt == "" || sp == "" || se == "" || sig == "" || ses != "" || q.Has("sr") || q.Has("si") {
		return "", errSASForm
	}
	for _, k := range sasParams {
		if len(q[k]) > 1 {
			return "", errSASForm
		}
	}
	expiry, err := sasTime(se)
	if err != nil {
		return "", errSASForm
	}
	if !now.Before(expiry) {
		return "", errSASExpired
	}
	if st != "" {
		start, err := sasTime(st)
		if err != nil {
			return "", errSASForm
		}
		if now.Before(start) {
			return "", errSASExpired
		}
	}
	switch spr {
	case "", "https,http":
	case "https":
		if r.TLS == nil {
			return "", errSASProtocol
		}
	default:
		return "", errSASForm
	}
	if sip != "" && !sasAddressAllowed(sip, r.RemoteAddr) {
		return "", errSASAddress
	}
	// A request with a copy source (Copy Blob, Put Blob, Block or Page
	// From URL, Append Block From URL) reads it too: it needs r besides
	// w, since the store may read a source of this account with the
	// gateway's credentials, which may read what the worker's SAS may not
	// (Azure's own SAS rules: r uses a blob as a copy's source).
	readsSource := r.Header.Get("X-Ms-Copy-Source") != ""
	if !strings.Contains(ss, "b") || !strings.Contains(srt, t.resourceType()) || !t.permitted(r.Method, sp) ||
		readsSource && !strings.Contains(sp, "r") {
		return "", errSASScope
	}
	names := make([]string, 0, len(clients))
	for n := range clients {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s := strings.Join([]string{n, sp, ss, srt, st, se, sip, spr, sv, ses, ""}, "\n")
		if hmac.Equal([]byte(clients[n].mac(s)), []byte(sig)) {
			return n, nil
		}
	}
	return "", errSASBadSigning
}

// sasTime reads a SAS's st or se (ISO 8601 in UTC, with or without
// seconds, or a date).
func sasTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04Z", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errSASForm
}

// sasAddressAllowed reports whether the client at remote (host:port) is in
// sip: one address or "low-high".
func sasAddressAllowed(sip, remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap()
	lo, hi, _ := strings.Cut(sip, "-")
	if hi == "" {
		hi = lo
	}
	l, err1 := netip.ParseAddr(lo)
	h, err2 := netip.ParseAddr(hi)
	return err1 == nil && err2 == nil && l.Compare(a) <= 0 && a.Compare(h) <= 0 && l.BitLen() == a.BitLen()
}

// resourceType is the account SAS resource type (srt) a request needs:
// s for the service, c for a container, o for a blob.
func (t target) resourceType() string {
	switch {
	case t.container == "":
		return "s"
	case t.blob == "":
		return "c"
	}
	return "o"
}

// permitted reports whether permissions sp allow the request. The gateway
// cannot tell a create from an overwrite before forwarding, so every blob
// write needs w (create alone, c, is not enough), a delete needs d, tags
// need t; a read needs r, a listing l.
func (t target) permitted(method, sp string) bool {
	need := "w"
	switch {
	case t.op == opRead && t.comp == "list":
		need = "l"
	case t.op == opRead:
		need = "r"
	case method == http.MethodDelete:
		need = "d"
	case t.comp == "tags":
		need = "t"
	}
	return strings.Contains(sp, need)
}

// withoutSAS is rawQuery without the worker's SAS parameters.
func withoutSAS(rawQuery string) string {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return rawQuery // parseTarget refused it already
	}
	for _, k := range sasParams {
		q.Del(k)
	}
	return q.Encode()
}
