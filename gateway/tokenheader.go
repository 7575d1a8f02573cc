package gateway

import (
	"fmt"
	"net/textproto"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// CheckTokenHeader reports why name cannot carry the fencing token, or nil.
// It must be a valid field name (RFC 9110 §5.1) that no other part of a
// request's handling claims: each of those would lock every fenced write
// out or read the token from something the client does not send as one.
// The server takes Host and the framing fields for itself, proxies drop the
// hop-by-hop fields (hopFields), the gateway refuses method overrides
// (methodOverrideHeaders), replaces the forwarding fields and decides on
// Authorization, and S3 routes sign X-Amz-* fields as the request's own.
func CheckTokenHeader(name string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return fmt.Errorf("%q is not a valid header field name", name)
	}
	k := textproto.CanonicalMIMEHeaderKey(name)
	why := ""
	switch {
	case k == "Host":
		why = "the server takes it as the request's host"
	case k == "Content-Length" || k == "Transfer-Encoding":
		why = "it frames the request body"
	case k == "Expect":
		why = "the server acts on it"
	case hopFields[k]:
		why = "it is hop-by-hop"
	case k == "Authorization":
		why = "the gateway and S3 routes read credentials from it"
	case slices.Contains(methodOverrideHeaders, k):
		why = "the gateway refuses requests that carry it"
	case k == "Forwarded" || strings.HasPrefix(k, "X-Forwarded-"):
		why = "the gateway replaces it"
	case strings.HasPrefix(k, "X-Amz-"):
		why = "S3 routes sign and forward X-Amz-* fields as the request's own"
	default:
		return nil
	}
	return fmt.Errorf("%s cannot carry the fencing token: %s", k, why)
}
