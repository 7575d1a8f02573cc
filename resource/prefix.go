package resource

import "strings"

// ExpandPrefix builds the key of the collection that vars name when they
// lack the variables of its members: the template expanded up to the last
// '/' before the first variable vars do not supply, that '/' left out.
// With "{bucket}/{key}" and only bucket it is the bucket's name; with
// "s3:{bucket}/{key.2}" it is "s3:" and the bucket's name. ok is false when
// vars supply every variable (the template names one member, not a
// collection), when no '/' of the template's own text separates the
// collection from the first missing variable, or when no variable is left
// in the collection's key. Keys below the collection key C start with
// C+"/" (MemberPrefix), so the template's members are below it.
func (t *Template) ExpandPrefix(vars Vars) (key string, ok bool) {
	var b strings.Builder
	expanded := false
	litStart := 0 // where the literal text after the last variable starts
	for _, p := range t.parts {
		if p.name == "" {
			b.WriteString(p.lit)
			continue
		}
		v, present := vars(p.name)
		if !present || v == "" {
			s := b.String()
			// Only the template's own text may be cut: a '/' inside a
			// variable's value is part of that value, not a level.
			i := strings.LastIndexByte(s[litStart:], '/')
			if i < 0 || !expanded {
				return "", false
			}
			return s[:litStart+i], true
		}
		b.WriteString(v)
		expanded = true
		litStart = b.Len()
	}
	return "", false
}
