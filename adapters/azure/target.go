package azure

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate"
)

// op is the kind of request, as the Blob service's REST API names them.
type op int

const (
	opRead        op = iota // not a write: forwarded as is
	opBlob                  // a write of one blob (Put Blob, Set Blob Metadata, Delete Blob, ...)
	opBlock                 // Put Block: stages a block; the blob is unchanged until a commit
	opBlockList             // Put Block List: commits staged blocks as the blob
	opCopy                  // Copy Blob, Put Blob From URL: the destination (this blob) is written
	opLease                 // Lease Blob: acquire, renew, change, release, break
	opContainer             // a write of a container (create, delete, ACL, metadata, lease)
	opUnsupported           // a write the gateway cannot name the blobs of
)

// target is what a request reads or writes.
type target struct {
	op        op
	container string
	blob      string // "" for a container-level request
	comp      string // the comp query parameter, lower case
	// path is the canonical escaped path below the account, forwarded
	// upstream: /container/blob with the blob name's "/" sent as is.
	path string
	// why says why an unsupported write is refused.
	why string
	// workerSAS: the worker authenticated with an account SAS, which
	// the forward does not carry.
	workerSAS bool
}

// parsePath reads the container and blob names from the escaped request
// path. The Blob service decodes the path and takes everything after the
// container as the blob name, so a "/" in the name is the same whether it
// was sent as %2F (azblob) or as is (the JavaScript and Python SDKs): the
// name is split on both and joined with "/". Segments the service might
// resolve or drop ("", ".", ".."), backslashes and control characters are
// refused: one spelling, one blob, one key.
func parsePath(escaped string) (container string, blob []string, trailingSlash bool, err error) {
	if escaped == "" || escaped == "/" {
		return "", nil, false, nil
	}
	if escaped[0] != '/' {
		return "", nil, false, errors.New("path must start with /")
	}
	rest := escaped[1:]
	if strings.HasSuffix(rest, "/") {
		trailingSlash = true
		rest = strings.TrimSuffix(rest, "/")
	}
	var names []string
	for _, raw := range strings.Split(rest, "/") {
		d, uerr := url.PathUnescape(raw)
		if uerr != nil {
			return "", nil, false, fmt.Errorf("invalid percent-encoding in %q", raw)
		}
		for _, s := range strings.Split(d, "/") {
			switch s {
			case "":
				return "", nil, false, errors.New("path contains an empty segment")
			case ".", "..":
				return "", nil, false, fmt.Errorf("path contains a %q segment", s)
			}
			for i := 0; i < len(s); i++ {
				if c := s[i]; c == '\\' || c < 0x20 || c == 0x7f {
					return "", nil, false, fmt.Errorf("path contains the character %#x", c)
				}
			}
			names = append(names, s)
		}
	}
	return names[0], names[1:], trailingSlash, nil
}

// escapeSegments is the escaped form of a path below the account.
func escapeSegments(segs []string) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

// parseTarget names what a request writes. The path is relative to the
// account: the worker's service URL is the gateway's address (the route's
// endpoint names the account).
func parseTarget(r *http.Request) (target, *fencegate.Error) {
	container, blob, slash, err := parsePath(r.URL.EscapedPath())
	if err != nil {
		return target{}, fencegate.InvalidResource("refused path: %s", err)
	}
	segs := append([]string{container}, blob...)
	if container == "" {
		segs = nil
	}
	t := target{container: container, blob: strings.Join(blob, "/"), path: escapeSegments(segs)}
	if slash && container != "" {
		t.path += "/"
	}
	q, qerr := url.ParseQuery(r.URL.RawQuery)
	if qerr != nil {
		return t, fencegate.InvalidRequest("the query string is not valid: %v", qerr)
	}
	for k, vs := range q {
		// The gateway and the service must read one value; the service
		// reads query names without regard to case.
		if len(vs) > 1 {
			return t, fencegate.InvalidRequest("the query parameter %s must be sent once", k)
		}
		lk := strings.ToLower(k)
		if lk != k && q.Has(lk) {
			return t, fencegate.InvalidRequest("the query parameter %s must be sent once", lk)
		}
	}
	get := func(name string) string {
		for k, vs := range q {
			if strings.EqualFold(k, name) {
				return vs[0]
			}
		}
		return ""
	}
	t.comp = strings.ToLower(get("comp"))
	if fencegate.ReadMethod(r.Method) {
		return t, nil
	}
	if _, ok := r.Header["X-Http-Method-Override"]; ok {
		return t, fencegate.InvalidRequest("X-HTTP-Method-Override is not accepted by the gateway: send the method itself")
	}
	if slash && t.blob != "" {
		return t, fencegate.InvalidResource("refused path: a blob name ending in / is not written through the gateway")
	}
	restype := strings.ToLower(get("restype"))
	switch {
	case t.comp == "batch":
		t.op, t.why = opUnsupported, "Blob Batch is not supported by the gateway: it would write blobs it does not fence; send each request on its own"
	case container == "":
		t.op, t.why = opUnsupported, "account-level writes (service properties) are not made through the gateway"
	case t.blob == "":
		if restype != "container" {
			t.op, t.why = opUnsupported, "a container write names restype=container"
			return t, nil
		}
		switch t.comp {
		case "", "metadata", "acl", "lease", "undelete", "rename", "immutablestoragewithversioning":
			t.op = opContainer
		default:
			t.op, t.why = opUnsupported, "this container operation is not known to the gateway"
		}
	case r.Method == http.MethodPut && t.comp == "block":
		t.op = opBlock
	case r.Method == http.MethodPut && t.comp == "blocklist":
		t.op = opBlockList
	case r.Method == http.MethodPut && t.comp == "lease":
		t.op = opLease
	case r.Method == http.MethodPut && t.comp == "" && r.Header.Get("X-Ms-Copy-Source") != "":
		t.op = opCopy
	case r.Method == http.MethodPut:
		switch t.comp {
		case "", "metadata", "properties", "tags", "tier", "snapshot", "copy", "page", "appendblock",
			"seal", "undelete", "expiry", "immutabilitypolicies", "legalhold", "incrementalcopy":
			t.op = opBlob
		default:
			t.op, t.why = opUnsupported, "this blob operation is not known to the gateway"
		}
	case r.Method == http.MethodDelete && t.comp == "":
		t.op = opBlob
	case r.Method == http.MethodDelete && t.comp == "immutabilitypolicies":
		t.op = opBlob
	default:
		t.op, t.why = opUnsupported, "this blob operation is not known to the gateway"
	}
	return t, nil
}
