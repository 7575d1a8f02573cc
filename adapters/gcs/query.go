package gcs

import (
	"net/url"
	"strings"

	"github.com/fencegate/fencegate"
)

// param is how the gateway accepts a query parameter of a write.
type param int

const (
	pText    param = iota // any non-empty value
	pInteger              // a generation, a metageneration, a byte count: decimal digits
	pUpload               // on the upload paths only
)

// writeParams are the query parameters a write through the gateway may
// carry: the JSON API's standard ones and those of the writes in the
// table, spelled as the API spells them. Any other name is refused, and so
// is a known one in another case (a store that folds case would read it),
// so that no parameter the gateway did not read can change what a write
// does.
var writeParams = map[string]param{
	"alt": pText, "fields": pText, "key": pText, "prettyPrint": pText, "quotaUser": pText,
	"userIp": pText, "userProject": pText, "projection": pText, "provisionalUserProject": pText,
	"ifGenerationMatch": pInteger, "ifGenerationNotMatch": pInteger,
	"ifMetagenerationMatch": pInteger, "ifMetagenerationNotMatch": pInteger,
	"ifSourceGenerationMatch": pInteger, "ifSourceGenerationNotMatch": pInteger,
	"ifSourceMetagenerationMatch": pInteger, "ifSourceMetagenerationNotMatch": pInteger,
	"generation": pInteger, "sourceGeneration": pInteger, "maxBytesRewrittenPerCall": pInteger,
	"predefinedAcl": pText, "destinationPredefinedAcl": pText, "predefinedDefaultObjectAcl": pText,
	"kmsKeyName": pText, "destinationKmsKeyName": pText, "contentEncoding": pText,
	"rewriteToken": pText, "overrideUnlockedRetention": pText,
	"uploadType": pUpload, "name": pUpload, "upload_id": pUpload, sessionParam: pUpload,
}

// foldedParams maps each known name, folded, to its spelling.
var foldedParams = func() map[string]string {
	m := make(map[string]string, len(writeParams))
	for k := range writeParams {
		m[strings.ToLower(k)] = k
	}
	return m
}()

// parseQuery reads a write's query string as the gateway and the store
// must both read it: every parameter known, in its own case, once (in any
// case), with a value (an empty ifGenerationMatch= is no condition for one
// reader and the worker's condition for another); upload parameters on
// upload paths only.
func parseQuery(raw string, upload bool) (url.Values, *fencegate.Error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fencegate.InvalidRequest("the query string is not valid: %v", err)
	}
	seen := make(map[string]bool, len(q))
	for k, vs := range q {
		folded := strings.ToLower(k)
		if seen[folded] || len(vs) > 1 {
			return nil, fencegate.InvalidRequest("the query parameter %s is sent more than once (in some case): the store and the gateway could read different values", k)
		}
		seen[folded] = true
		kind, ok := writeParams[k]
		switch {
		case !ok && foldedParams[folded] != "":
			return nil, fencegate.InvalidRequest("the query parameter %s is spelled %s by the JSON API: send it so", k, foldedParams[folded])
		case !ok:
			return nil, fencegate.InvalidRequest("the query parameter %s is not known to the gateway on writes", k)
		case kind == pUpload && !upload:
			return nil, fencegate.InvalidRequest("the query parameter %s is accepted on uploads only", k)
		case vs[0] == "":
			return nil, fencegate.InvalidRequest("the query parameter %s has no value", k)
		case kind == pInteger && strings.Trim(vs[0], "0123456789") != "":
			return nil, fencegate.InvalidRequest("the query parameter %s must be a decimal number", k)
		}
	}
	return q, nil
}
