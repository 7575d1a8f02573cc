package azure

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/httprefusal"
	"github.com/fencegate/fencegate/resource"
)

// How a write is classified, and why it fails closed.
//
// The Blob service (and Azurite, whose dispatcher is generated from the
// same specification) picks the operation it runs from the method, the
// path's level, the restype and comp query parameters and a few headers
// (x-ms-copy-source, x-ms-blob-type, x-ms-lease-action, ...). Azurite
// reads query names and comp/restype values exactly as sent (comp=Block
// is no Put Block; Comp=block is no comp at all; a name sent twice is an
// array that matches no operation), and of the operations whose required
// parameters a request carries it runs the one that requires the most:
// a Put Block without a blockid, a Set Blob Tier without its tier, is
// run as whichever other operation the request also satisfies (Put Blob,
// Copy Blob), extra parameters ignored. The service reads parameter
// names without regard to case (the Shared Key string lowers them).
//
// So the gateway accepts a write only when every reading agrees: query
// names in their one (lower-case) spelling, from a short list, each once,
// none empty; comp and restype values spelled as the table spells them;
// the row's required parameters present, so that the store cannot fall
// back to another operation; headers that select another operation
// (x-ms-blob-type, x-ms-copy-source, ...) only on the rows that take them;
// condition headers once and not empty; a known Content-Length. Anything
// else is refused in the store's error format, before the fence.

// level is the part of the account a request's path names.
type level int

const (
	levelContainer level = iota
	levelBlob
)

func (l level) String() string {
	if l == levelContainer {
		return "a container write"
	}
	return "a blob write"
}

// writeRule is one row of the write table.
type writeRule struct {
	method  string
	level   level
	restype string // "container" on container rows
	comp    string // as the store spells it
	op      op
	// params are query parameters the operation requires (besides comp
	// and restype): without them the store would run another operation.
	params []string
	// selectors are the operation-selecting headers the row takes, with
	// the values allowed (nil: any non-empty value); a selector the row
	// does not name is refused. required ones must be sent.
	selectors []selector
	// refuse, if set, refuses the row's requests with this reason.
	refuse string
}

type selector struct {
	name     string // canonical header name
	values   []string
	required bool
}

// selectorHeaders are the headers the store picks an operation by (or
// that make it write another resource). A request carries one only where
// its row takes it.
var selectorHeaders = []string{
	"X-Ms-Blob-Type", "X-Ms-Copy-Source", "X-Ms-Requires-Sync", "X-Ms-Lease-Action",
	"X-Ms-Page-Write", "X-Ms-Copy-Action", "X-Ms-Source-Container-Name", "X-Ms-Rename-Source",
	"X-Ms-Deleted-Container-Name", "X-Ms-Deleted-Container-Version",
}

var (
	copySource  = selector{name: "X-Ms-Copy-Source"}
	leaseAction = selector{name: "X-Ms-Lease-Action", values: []string{"acquire", "release", "renew", "change", "break"}, required: true}
)

// writeRules is the write table: every write the gateway forwards is one
// of these rows.
var writeRules = []writeRule{
	// Containers (restype=container): the container and every blob in it.
	{method: http.MethodPut, level: levelContainer, restype: "container", op: opContainer},
	{method: http.MethodPut, level: levelContainer, restype: "container", comp: "metadata", op: opContainer},
	{method: http.MethodPut, level: levelContainer, restype: "container", comp: "acl", op: opContainer},
	{method: http.MethodPut, level: levelContainer, restype: "container", comp: "lease", op: opContainer, selectors: []selector{leaseAction}},
	{method: http.MethodPut, level: levelContainer, restype: "container", comp: "undelete", op: opContainer, selectors: []selector{
		{name: "X-Ms-Deleted-Container-Name", required: true}, {name: "X-Ms-Deleted-Container-Version", required: true}}},
	{method: http.MethodPut, level: levelContainer, restype: "container", comp: "rename",
		refuse: "Rename Container is not made through the gateway: it moves every blob of the source container " +
			"(x-ms-source-container-name) under another container's name, and the gateway admits a write on one container's fences"},
	{method: http.MethodDelete, level: levelContainer, restype: "container", op: opContainer},

	// Blobs. Put Blob, Copy Blob, sync copy and Put Blob From URL share
	// the row without comp: the copy source and the blob type select
	// among them, and each replaces the blob (parseTarget tells a copy).
	{method: http.MethodPut, level: levelBlob, op: opBlob, selectors: []selector{copySource,
		{name: "X-Ms-Blob-Type", values: []string{"BlockBlob", "PageBlob", "AppendBlob"}},
		{name: "X-Ms-Requires-Sync", values: []string{"true"}}}},
	{method: http.MethodPut, level: levelBlob, comp: "block", op: opBlock, params: []string{"blockid"}, selectors: []selector{copySource}},
	{method: http.MethodPut, level: levelBlob, comp: "blocklist", op: opBlockList},
	{method: http.MethodPut, level: levelBlob, comp: "page", op: opBlob, selectors: []selector{copySource,
		{name: "X-Ms-Page-Write", values: []string{"update", "clear"}, required: true}}},
	{method: http.MethodPut, level: levelBlob, comp: "appendblock", op: opBlob, selectors: []selector{copySource}},
	{method: http.MethodPut, level: levelBlob, comp: "metadata", op: opBlob},
	{method: http.MethodPut, level: levelBlob, comp: "properties", op: opBlob},
	{method: http.MethodPut, level: levelBlob, comp: "tags", op: opBlob},
	{method: http.MethodPut, level: levelBlob, comp: "tier", op: opBlob},
	{method: http.MethodPut, level: levelBlob, comp: "snapshot", op: opBlob},
	{method: http.MethodPut, level: levelBlob, comp: "undelete", op: opBlob},
	{method: http.MethodPut, level: levelBlob, comp: "seal", op: opBlob},
	{method: http.MethodPut, level: levelBlob, comp: "expiry", op: opBlob},
	{method: http.MethodPut, level: levelBlob, comp: "lease", op: opLease, selectors: []selector{leaseAction}},
	{method: http.MethodPut, level: levelBlob, comp: "copy", op: opBlob, params: []string{"copyid"}, selectors: []selector{
		{name: "X-Ms-Copy-Action", values: []string{"abort"}, required: true}}},
	{method: http.MethodDelete, level: levelBlob, op: opBlob},
}

// requiredHeaders are headers a row's operation requires without
// selecting it (the store refuses the request without them, rather than
// run another operation; the gateway refuses it first).
var requiredHeaders = map[string][]string{
	"tier":   {"X-Ms-Access-Tier"},
	"expiry": {"X-Ms-Expiry-Option"},
}

// findRule is the row of a write; false if none.
func findRule(method string, lvl level, restype, comp string) (writeRule, bool) {
	for _, w := range writeRules {
		if w.method == method && w.level == lvl && w.restype == restype && w.comp == comp {
			return w, true
		}
	}
	return writeRule{}, false
}

// check refuses a request that lacks what the row's operation requires,
// or carries a selector of another operation.
func (w writeRule) check(r *http.Request, q resource.Query) *fencegate.Error {
	for _, p := range w.params {
		if q.Get(p) == "" {
			return fencegate.InvalidRequest("%s?comp=%s needs the %s query parameter: without it the store runs another operation", r.Method, w.comp, p)
		}
	}
	for _, h := range selectorHeaders {
		vs, sent := r.Header[h]
		i := slices.IndexFunc(w.selectors, func(s selector) bool { return s.name == h })
		switch {
		case i < 0 && sent:
			return fencegate.InvalidRequest("%s is not accepted on this operation (comp %q): it would make the store run another one, or write another resource", h, w.comp)
		case i < 0:
		case !sent && w.selectors[i].required:
			return fencegate.InvalidRequest("this operation (comp %q) needs %s", w.comp, h)
		case sent && w.selectors[i].values != nil && !slices.Contains(w.selectors[i].values, vs[0]):
			return fencegate.InvalidRequest("%s must be one of %s, spelled so", h, strings.Join(w.selectors[i].values, ", "))
		}
	}
	if w.level == levelBlob && w.comp == "" && w.method == http.MethodPut &&
		r.Header.Get("X-Ms-Copy-Source") == "" && r.Header.Get("X-Ms-Blob-Type") == "" {
		return fencegate.InvalidRequest("Put Blob needs x-ms-blob-type")
	}
	for _, h := range requiredHeaders[w.comp] {
		if r.Header.Get(h) == "" {
			return fencegate.InvalidRequest("this operation (comp %q) needs %s", w.comp, h)
		}
	}
	return nil
}

// oneValueHeaders are the headers that select an operation or set a
// condition: each is sent once, and not empty. A store that joins
// repeated fields, or reads an empty condition as none, would otherwise
// read another request than the gateway.
var oneValueHeaders = append([]string{
	"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since",
	"X-Ms-If-Tags", "X-Ms-Lease-Id", "X-Ms-Proposed-Lease-Id", "X-Ms-Access-Tier",
	"X-Ms-Source-If-Match", "X-Ms-Source-If-None-Match", "X-Ms-Source-If-Modified-Since",
	"X-Ms-Source-If-Unmodified-Since", "X-Ms-Source-If-Tags", "X-Ms-Source-Lease-Id",
	"X-Ms-If-Sequence-Number-Le", "X-Ms-If-Sequence-Number-Lt", "X-Ms-If-Sequence-Number-Eq",
	"X-Ms-Blob-Condition-Maxsize", "X-Ms-Blob-Condition-Appendpos", "X-Ms-Expiry-Option",
}, selectorHeaders...)

// checkWriteHeaders refuses headers a store could read otherwise than the
// gateway, and a body of unknown length (without a Content-Length the
// store's dispatcher matches no operation that requires one, and runs
// another that does not).
func checkWriteHeaders(r *http.Request) *fencegate.Error {
	for _, h := range oneValueHeaders {
		vs, ok := r.Header[h]
		switch {
		case !ok:
		case len(vs) != 1:
			return fencegate.InvalidRequest("%s must be sent once", h)
		case strings.TrimSpace(vs[0]) == "":
			return fencegate.InvalidRequest("%s is empty: a store may read an empty condition as none; leave it out", h)
		}
	}
	if r.ContentLength < 0 {
		return httprefusal.WithStatus(http.StatusLengthRequired, fencegate.Errorf(fencegate.CodeInvalidRequest,
			"an Azure write needs a Content-Length (the store runs another operation without one)"))
	}
	return nil
}

// readRules read a read's query: its names are the store's to judge
// (what a read lists decides only the SAS permission it needs), but a name
// sent twice in any case is refused all the same: the service reads names
// without regard to case, Azurite reads a repeated name as an array that
// matches no operation.
var readRules = &resource.QueryRules{OtherNames: true, EncodedNames: true}

// writeRules are the query parameters a write may carry, spelled as the
// SDKs and the store spell them: the operation's (comp, restype, blockid,
// copyid), what it addresses (snapshot, versionid), timeout, and a
// worker's account SAS; each with a value, none percent-encoded in its
// name (Azurite dispatches on the decoded name and verifies signatures on
// the encoded one).
var writeQueryRules = func() *resource.QueryRules {
	r := &resource.QueryRules{Params: map[string]resource.ParamRule{}}
	for _, n := range append([]string{"comp", "restype", "blockid", "copyid", "snapshot", "versionid", "timeout"}, sasParams...) {
		r.Params[n] = resource.ParamText
	}
	return r
}()

// parseQuery reads a request's query (resource.ParseQuery) with the rules
// of a read or a write.
func parseQuery(raw string, write bool) (resource.Query, *fencegate.Error) {
	rules := readRules
	if write {
		rules = writeQueryRules
	}
	q, err := resource.ParseQuery(raw, rules)
	if err != nil {
		return nil, fencegate.InvalidRequest("%s", err)
	}
	return q, nil
}

// getFold is the value of the parameter named name in any case (a read's
// comp, which decides its SAS permission).
func getFold(q resource.Query, name string) string {
	for _, p := range q {
		if strings.EqualFold(p.Name, name) {
			return p.Value
		}
	}
	return ""
}

// describe names a request's row for a refusal.
func describe(method string, lvl level, restype, comp string) string {
	return fmt.Sprintf("%s (method %s, restype %q, comp %q)", lvl, method, restype, comp)
}

// Classified is what the gateway makes of a write (Classify).
type Classified struct {
	// Fenced is "C" for a container write (the container and every blob
	// in it), "C/B" for a blob's, "" for a read.
	Fenced string
	// SetsMetadata: the write replaces the blob's metadata (Put Blob, Put
	// Block List, copies, Set Blob Metadata), which a stamping route
	// stamps; any other write leaves the metadata to the store.
	SetsMetadata bool
}

// Classify is what the gateway makes of a request, as Inspect reads it
// (the signature aside); an error if the gateway refuses it. The
// write-set oracle (e2e) checks it against what the store changed when
// sent the same request.
func Classify(r *http.Request) (Classified, error) {
	t, ferr := parseTarget(r)
	switch {
	case ferr != nil:
		return Classified{}, ferr
	case t.op == opUnsupported:
		return Classified{}, fencegate.InvalidRequest("%s", t.why)
	case t.op == opRead:
		return Classified{}, nil
	case t.op == opContainer:
		return Classified{Fenced: t.container}, nil
	}
	return Classified{Fenced: t.container + "/" + t.blob, SetsMetadata: stamped(r.Method, t)}, nil
}
