package gateway

import (
	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/resource"
)

// collectionKey is the key of the collection vars name: the whole
// template's expansion when it has no member variables (every object of
// the collection shares that key), else its expansion up to the members'
// level. A template with neither (its collection level is not a prefix
// of its members' keys) cannot fence a collection write.
func (rt *Route) collectionKey(rv requestVars, vars map[string]string) (string, *fencegate.Error) {
	rv.extra = vars
	if k, err := rt.tmpl.Expand(rv.lookup); err == nil {
		return k, nil
	}
	k, ok := rt.tmpl.ExpandPrefix(rv.lookup)
	if !ok {
		return "", fencegate.InvalidResource("resource template %q has no key for the collection of this request: "+
			"it writes the whole collection, and the template's collection part must come before a / ahead of the members' variables", rt.tmpl.String())
	}
	if len(k) > resource.MaxKeyLen {
		return "", fencegate.InvalidResource("resource key is %d bytes; the limit is %d", len(k), resource.MaxKeyLen)
	}
	return k, nil
}
