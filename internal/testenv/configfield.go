package testenv

import (
	"reflect"
	"strings"
)

// HasConfigField reports whether the configuration struct v has the field
// at the YAML path (e.g. "store", "etcd", "tls"), following pointers,
// slices and inline structs. A test of a shipped file that uses a field
// still being built (in another branch) checks everything else until it
// lands, then all of it, with no edit.
func HasConfigField(v any, path ...string) bool {
	t := reflect.TypeOf(v)
	for _, name := range path {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return false
		}
		f, ok := yamlField(t, name)
		if !ok {
			return false
		}
		t = f.Type
	}
	return true
}

func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if strings.Contains(opts, "inline") {
			if g, ok := yamlField(f.Type, name); ok {
				return g, true
			}
			continue
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
