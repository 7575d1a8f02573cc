package testenv_test

import (
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/testenv"
)

// HasConfigField gates tests of shipped files on fields still being built:
// a wrong answer either way would skip a check for ever or fail a branch
// that does not have the field.
func TestHasConfigField(t *testing.T) {
	for _, tt := range []struct {
		path []string
		want bool
	}{
		{[]string{"store", "postgres", "url"}, true},
		{[]string{"gateway", "routes", "token_source", "etcd", "tls", "ca_file"}, true}, // through a slice and pointers
		{[]string{"admin", "allowed_hosts"}, true},                                      // inline APIGuard
		{[]string{"store", "nosuchstore"}, false},
		{[]string{"store", "postgres", "url", "deeper"}, false},
		{[]string{"Store"}, false}, // YAML names, not Go's
	} {
		if got := testenv.HasConfigField(config.Config{}, tt.path...); got != tt.want {
			t.Errorf("HasConfigField(%v) = %v; want %v", tt.path, got, tt.want)
		}
	}
}
