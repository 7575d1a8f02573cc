package fencegate

// HTTP request methods the gateway knows by name. Method names are
// case-sensitive tokens (RFC 9110 §9.1); every registered method is upper
// case, and the gateway refuses requests whose method has a lower-case letter
// (many upstreams fold method case, so "put" would be applied as PUT).
//
// The list is the IANA HTTP Method Registry's methods from RFC 9110, PATCH
// (RFC 5789), WebDAV (RFC 4918) and the WebDAV extensions that register
// methods. A route's fenced_methods and match.methods may name these, or
// names the route declares in extension_methods (package config checks
// that; the gateway decides with KnownMethod and ReadMethod).
var knownMethods = map[string]bool{
	// RFC 9110
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true,
	"CONNECT": true, "OPTIONS": true, "TRACE": true,
	// RFC 5789
	"PATCH": true,
	// RFC 4918 (WebDAV)
	"PROPFIND": true, "PROPPATCH": true, "MKCOL": true, "COPY": true,
	"MOVE": true, "LOCK": true, "UNLOCK": true,
	// RFC 3253 (DeltaV versioning)
	"VERSION-CONTROL": true, "REPORT": true, "CHECKOUT": true, "CHECKIN": true,
	"UNCHECKOUT": true, "MKWORKSPACE": true, "UPDATE": true, "LABEL": true,
	"MERGE": true, "BASELINE-CONTROL": true, "MKACTIVITY": true,
	// RFC 3648, 3744, 4791, 5323, 5842, 8144
	"ORDERPATCH": true, "ACL": true, "MKCALENDAR": true, "SEARCH": true,
	"BIND": true, "UNBIND": true, "REBIND": true, "MKREDIRECTREF": true,
	"UPDATEREDIRECTREF": true,
}

// readMethods are the methods the gateway never fences by default (reads;
// fence_reads fences them too). Everything else, including methods the
// gateway does not know, is a write.
var readMethods = map[string]bool{"GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true}

// ReadMethods lists readMethods, for those who show the rule (the console).
func ReadMethods() []string { return []string{"GET", "HEAD", "OPTIONS", "TRACE"} }

// KnownMethod reports whether m is a registered HTTP method (exact spelling).
func KnownMethod(m string) bool { return knownMethods[m] }

// ReadMethod reports whether m is one of GET, HEAD, OPTIONS and TRACE, the
// only methods a route does not fence by default.
func ReadMethod(m string) bool { return readMethods[m] }
