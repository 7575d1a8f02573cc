package resource

import "strings"

// Parents returns the keys of the collections above key in a hierarchy of
// keys separated by '/', outermost first: for "/dav/coll/m" they are "/",
// "/dav" and "/dav/coll"; for "bucket/a/b", "bucket" and "bucket/a". The
// keys below a key K are those that start with MemberPrefix(K), so K is in
// Parents(M) exactly when M starts with MemberPrefix(K) (empty segments,
// which cleaned keys do not have, aside). A trailing '/' names no level.
func Parents(key string) []string {
	key = strings.TrimSuffix(key, "/")
	var out []string
	for i := 0; i < len(key); i++ {
		if key[i] != '/' {
			continue
		}
		if i == 0 {
			out = append(out, "/")
		} else {
			out = append(out, key[:i])
		}
	}
	return out
}

// MemberPrefix is the prefix shared by every key below key: key+"/", or
// key itself when it ends in '/' (the root "/").
func MemberPrefix(key string) string {
	if strings.HasSuffix(key, "/") {
		return key
	}
	return key + "/"
}
