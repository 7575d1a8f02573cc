package gcs

import (
	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/resource"
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

// queryRules are writeParams as resource.ParseQuery takes them.
var queryRules = func() *resource.QueryRules {
	r := &resource.QueryRules{Params: make(map[string]resource.ParamRule, len(writeParams)), EncodedNames: true}
	for k, kind := range writeParams {
		r.Params[k] = resource.ParamText
		if kind == pInteger {
			r.Params[k] = resource.ParamInteger
		}
	}
	return r
}()

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
		if writeParams[p.Name] == pUpload && !upload {
			return nil, fencegate.InvalidRequest("the query parameter %s is accepted on uploads only", p.Name)
		}
	}
	return q, nil
}
