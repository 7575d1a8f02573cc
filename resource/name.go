package resource

import (
	"errors"
	"strings"
)

// CanonicalName is the one spelling of a resource name that a worker or an
// operator gives by hand (a lease's resource, an admin fence call), so that
// it names the same fence key the gateway derives from requests. A name
// starting with "/" is a path and is cleaned exactly as the gateway cleans
// request paths for {path}: CleanPath, then JoinPath without a trailing
// slash, because {path} drops it ("/orders//22", "/orders/./22" and
// "/orders//22/" are all "/orders/22"); ".." segments, encoded
// slashes, backslashes, control characters and bad percent-encoding are
// refused, as the gateway refuses such requests. Other names (S3
// "bucket/key", "tenant:..." templates) are kept as they are, but a ".."
// segment or a control character is refused there too.
func CanonicalName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		segs, err := CleanPath(name)
		if err != nil {
			return "", err
		}
		return JoinPath(segs, false), nil
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == 0x7f {
			return "", errors.New("name contains a control character")
		}
	}
	for _, s := range strings.Split(name, "/") {
		if s == ".." {
			return "", errors.New(`name contains a ".." segment`)
		}
	}
	return name, nil
}
