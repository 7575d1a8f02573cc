package gateway

import (
	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/resource"
)

// collectionKey is the key of a write of the collection vars name
// (Inspection.WritesCollection): the whole template's expansion when it has
// no member variables (the collection and every object in it share that
// key), else its expansion up to the members' level.
func (rt *Route) collectionKey(rv requestVars, vars map[string]string) (string, *fencegate.Error) {
	rv.extra = vars
	if k, err := rt.tmpl.Expand(rv.lookup); err == nil {
		return k, nil
	}
	k, ok := rt.tmpl.ExpandPrefix(rv.lookup)
	if !ok {
		return "", fencegate.InvalidResource("resource template %q has no key for the collection this request writes: "+
			"the collection's part must come first, followed by / and the members' variables (\"{bucket}/{key}\")", rt.tmpl.String())
	}
	if len(k) > resource.MaxKeyLen {
		return "", fencegate.InvalidResource("resource key is %d bytes; the limit is %d", len(k), resource.MaxKeyLen)
	}
	if !rt.hier || !rt.collections {
		// The collection's fence would not see its members' tokens.
		return "", fencegate.InvalidResource("a write of the whole collection %q needs a hierarchical route (hierarchical: true), "+
			"where it is checked against the fences of the objects below it", k)
	}
	return k, nil
}

// collectionAdmission is the admission a request gets on its collection's
// key on a hierarchical route whose upstream names collections: ScopeTree
// for a write of the collection itself, ScopeMember for a write of objects
// in it. None (the zero admission) where the collection and its objects
// share one key, or the route is not hierarchical.
func (rt *Route) collectionAdmission(rv requestVars, insp Inspection) (admission, *fencegate.Error) {
	if !rt.collections || !rt.hier || insp.Collection == nil {
		return admission{}, nil
	}
	rv.extra = insp.Collection
	if _, err := rt.tmpl.Expand(rv.lookup); err == nil {
		return admission{}, nil // one key for the collection and its objects
	}
	k, ok := rt.tmpl.ExpandPrefix(rv.lookup)
	if !ok || len(k) > resource.MaxKeyLen {
		if insp.WritesCollection {
			// resources refused it already.
			return admission{}, fencegate.InvalidResource("no key for the collection this request writes")
		}
		return admission{}, nil
	}
	if insp.WritesCollection {
		return admission{k, ScopeTree}, nil
	}
	return admission{k, ScopeMember}, nil
}
