// Package api holds fencegate's machine contracts: the OpenAPI 3.1 document
// of the coordinator and admin APIs (openapi.json) and the JSON Schema of
// the YAML configuration (config.schema.json). Both are checked against
// what the code accepts and answers by this package's tests.
package api

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
)

// OpenAPI is the whole OpenAPI document: every listener's operations,
// tagged "coordinator" or "admin".
//
//go:embed openapi.json
var OpenAPI []byte

// ConfigSchema is the JSON Schema (2020-12) of the configuration file.
//
//go:embed config.schema.json
var ConfigSchema []byte

var (
	docsMu sync.Mutex
	docs   = map[string][]byte{}
)

// OpenAPIFor returns the document with only the operations tagged
// listener ("coordinator" or "admin"): what that listener serves.
func OpenAPIFor(listener string) []byte {
	docsMu.Lock()
	defer docsMu.Unlock()
	if b, ok := docs[listener]; ok {
		return b
	}
	var doc map[string]any
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		panic("api: openapi.json: " + err.Error()) // the tests parse it
	}
	paths, _ := doc["paths"].(map[string]any)
	for p, item := range paths {
		ops, _ := item.(map[string]any)
		for method, op := range ops {
			o, _ := op.(map[string]any)
			tags, _ := o["tags"].([]any)
			if !slices.Contains(tags, any(listener)) {
				delete(ops, method)
			}
		}
		if len(ops) == 0 {
			delete(paths, p)
		}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic("api: " + err.Error())
	}
	docs[listener] = append(b, '\n')
	return docs[listener]
}

// Handler serves OpenAPIFor(listener) (GET /openapi.json).
func Handler(listener string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(OpenAPIFor(listener))
	})
}
