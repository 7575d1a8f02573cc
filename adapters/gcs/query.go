package gcs

import (
	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/resource"
)

// text and integer are the rules of a write's query parameters: any
// non-empty value; decimal digits (a generation, a metageneration, a byte
// count).
const text, integer = resource.ParamText, resource.ParamInteger

// queryRules are the query parameters a write through the gateway may
// carry: the JSON API's standard ones and those of the writes in the
// table, spelled as the API spells them. Any other name is refused, and so
// is a known one in another case (a store that folds case would read it),
// so that no parameter the gateway did not read can change what a write
// does. The uploadParams are accepted on the upload paths only.
var queryRules = &resource.QueryRules{EncodedNames: true, Params: map[string]resource.ParamRule{
	"alt": text, "fields": text, "key": text, "prettyPrint": text, "quotaUser": text,
	"userIp": text, "userProject": text, "projection": text, "provisionalUserProject": text,
	"ifGenerationMatch": integer, "ifGenerationNotMatch": integer,
	"ifMetagenerationMatch": integer, "ifMetagenerationNotMatch": integer,
	"ifSourceGenerationMatch": integer, "ifSourceGenerationNotMatch": integer,
	"ifSourceMetagenerationMatch": integer, "ifSourceMetagenerationNotMatch": integer,
	"generation": integer, "sourceGeneration": integer, "maxBytesRewrittenPerCall": integer,
	"predefinedAcl": text, "destinationPredefinedAcl": text, "predefinedDefaultObjectAcl": text,
	"kmsKeyName": text, "destinationKmsKeyName": text, "contentEncoding": text,
	"rewriteToken": text, "overrideUnlockedRetention": text,
	"uploadType": text, "name": text, "upload_id": text, sessionParam: text,
}}

var uploadParams = map[string]bool{"uploadType": true, "name": true, "upload_id": true, sessionParam: true}

// parseQuery reads a write's query string as the gateway and the store
// must both read it (resource.ParseQuery: every parameter known, in its
// own case, once in any case, with a value: an empty ifGenerationMatch=
// is no condition for one reader and the worker's condition for another);
// upload parameters on upload paths only.
func parseQuery(raw string, upload bool) (resource.Query, *fencegate.Error) {
	q, err := resource.ParseQuery(raw, queryRules)
	if err != nil {
		return nil, fencegate.InvalidRequest("%s", err)
	}
	for _, p := range q {
		if uploadParams[p.Name] && !upload {
			return nil, fencegate.InvalidRequest("the query parameter %s is accepted on uploads only", p.Name)
		}
	}
	return q, nil
}
