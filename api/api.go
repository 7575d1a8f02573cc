// Package api holds fencegate's machine contracts: the OpenAPI 3.1 documents
// of the coordinator and admin APIs (*.openapi.json) and the JSON Schema of
// the YAML configuration (config.schema.json). Both are checked against
// what the code accepts and answers by this package's tests.
package api

import (
	_ "embed"
	"net/http"
)

// The OpenAPI 3.1 documents, one per listener. Two documents, not one
// with tags: both listeners answer GET /v1/leases, differently (the
// coordinator one lease, the admin console a page of them).
var (
	//go:embed coordinator.openapi.json
	coordinatorDoc []byte
	//go:embed admin.openapi.json
	adminDoc []byte
)

// ConfigSchema is the JSON Schema (2020-12) of the configuration file,
// generated from the config structs (their yaml and jsonschema tags and
// doc comments) by `go generate ./config` (config/internal/schemagen):
// the generator reads package config, which this package must not import,
// since the coordinator and the server serve these contracts.
//
//go:embed config.schema.json
var ConfigSchema []byte

// Listeners are the listeners with an OpenAPI document.
var Listeners = []string{"coordinator", "admin"}

// OpenAPIFor returns the OpenAPI document of listener ("coordinator" or
// "admin"); nil for another name.
func OpenAPIFor(listener string) []byte {
	switch listener {
	case "coordinator":
		return coordinatorDoc
	case "admin":
		return adminDoc
	}
	return nil
}

// Handler serves OpenAPIFor(listener) (GET /openapi.json).
func Handler(listener string) http.Handler {
	doc := OpenAPIFor(listener)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(doc)
	})
}
