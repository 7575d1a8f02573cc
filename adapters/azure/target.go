package azure

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/objectstore"
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
		switch s, bad := objectstore.BadSegment(d); {
		case bad && s == "":
			return "", nil, false, errors.New("path contains an empty segment")
		case bad:
			return "", nil, false, fmt.Errorf("path contains a %q segment", s)
		}
		if c, bad := objectstore.BadByte(d); bad {
			return "", nil, false, fmt.Errorf("path contains the character %#x", c)
		}
		names = append(names, strings.Split(d, "/")...)
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

// parseTarget names what a request reads or writes. The path is relative
// to the account: the worker's service URL is the gateway's address (the
// route's endpoint names the account).
//
// A write is classified from an explicit table (writeRules): its method,
// its level (container or blob), restype and comp name one row, which
// gives the operation and what else the request must carry; a write no
// row names is refused. The store picks the operation it runs by reading
// the same parameters, and the table is written so that the store can
// pick no other one (docs/security.md, "How Azure classification fails
// closed").
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
	read := fencegate.ReadMethod(r.Method)
	q, ferr := parseQuery(r.URL.RawQuery, !read)
	if ferr != nil {
		return t, ferr
	}
	if read {
		// What a read lists or reads decides the SAS permission it
		// needs, not a fence.
		t.comp = strings.ToLower(getFold(q, "comp"))
		return t, nil
	}
	if ferr := checkWriteHeaders(r); ferr != nil {
		return t, ferr
	}
	if slash && t.blob != "" {
		return t, fencegate.InvalidResource("refused path: a blob name ending in / is not written through the gateway")
	}
	t.comp = q.Get("comp")
	switch {
	case t.comp == "batch":
		t.op, t.why = opUnsupported, "Blob Batch is not supported by the gateway: it would write blobs it does not fence; send each request on its own"
		return t, nil
	case container == "":
		t.op, t.why = opUnsupported, "account-level writes (service properties) are not made through the gateway"
		return t, nil
	}
	lvl := levelBlob
	if t.blob == "" {
		lvl = levelContainer
	}
	rule, ok := findRule(r.Method, lvl, q.Get("restype"), t.comp)
	if !ok {
		t.op, t.why = opUnsupported, describe(r.Method, lvl, q.Get("restype"), t.comp)+
			" is not a write the gateway knows: it is refused rather than guessed"
		return t, nil
	}
	if rule.refuse != "" {
		t.op, t.why = opUnsupported, rule.refuse
		return t, nil
	}
	if ferr := rule.check(r, q); ferr != nil {
		return t, ferr
	}
	t.op = rule.op
	if rule.op == opBlob && t.comp == "" && r.Header.Get("X-Ms-Copy-Source") != "" {
		t.op = opCopy
	}
	return t, nil
}
