package main

import (
	"context"
	"os"

	"github.com/fencegate/fencegate/api"
)

// configCmd prints the configuration's machine contract:
//
//	fencegate config schema    the JSON Schema of the YAML file
//
// Editors that speak the YAML language server use it from a first line
// `# yaml-language-server: $schema=PATH-OR-URL` (see configs/*.yaml).
type configCmd struct{}

const configSynopsis = `schema

  schema    print the JSON Schema (2020-12) of the configuration file

Example:
  fencegate config schema > fencegate.schema.json
  # then, first line of fencegate.yaml:
  # yaml-language-server: $schema=fencegate.schema.json`

func (c *configCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("config", configSynopsis)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || fs.Arg(0) != "schema" {
		return usagef("want: fencegate config schema")
	}
	_, err := os.Stdout.Write(api.ConfigSchema)
	return err
}
