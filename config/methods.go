package config

// methodToken reports whether m is a valid method token (RFC 9110 §5.6.2)
// in the gateway's spelling: upper-case letters, digits and the token
// punctuation, at least one letter, no lower case.
func methodToken(m string) bool {
	if m == "" {
		return false
	}
	letter := false
	for i := 0; i < len(m); i++ {
		c := m[i]
		switch {
		case c >= 'A' && c <= 'Z':
			letter = true
		case c >= '0' && c <= '9':
		case c < 0x80 && c > ' ' && c != 0x7f && !(c >= 'a' && c <= 'z') && !isDelimiter(c):
		default:
			return false
		}
	}
	return letter
}

// isDelimiter reports the RFC 9110 §5.6.2 delimiters, which tokens exclude.
func isDelimiter(c byte) bool {
	switch c {
	case '"', '(', ')', ',', '/', ':', ';', '<', '=', '>', '?', '@', '[', '\\', ']', '{', '}':
		return true
	}
	return false
}
