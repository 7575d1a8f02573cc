package main

import (
	"context"

	"github.com/fencegate/fencegate/api"
	"github.com/spf13/cobra"
)

// config prints the configuration's machine contract:
//
//	fencegate config schema    the JSON Schema of the YAML file
//
// Editors that speak the YAML language server use it from a first line
// `# yaml-language-server: $schema=PATH-OR-URL` (see configs/*.yaml).
type configSchemaCmd struct{ printer }

func newConfigCmd() *cobra.Command {
	c := &configSchemaCmd{}
	schema := wrap(&cobra.Command{
		Use:   "schema",
		Short: "print the JSON Schema (2020-12) of the configuration file",
		Long: `Schema prints the JSON Schema (2020-12) of the YAML configuration file.
Editors that speak the YAML language server check and complete a file whose
first line names it: # yaml-language-server: $schema=PATH-OR-URL`,
		Example: `  fencegate config schema > fencegate.schema.json
  # then, first line of fencegate.yaml:
  # yaml-language-server: $schema=fencegate.schema.json`,
		Args: noArgs,
	}, c)
	return group(&cobra.Command{
		Use:     "config",
		Short:   "print the configuration's JSON Schema",
		Example: "  fencegate config schema > fencegate.schema.json",
	}, schema)
}

func (c *configSchemaCmd) Run(ctx context.Context, args []string) error {
	_, err := c.stdout().Write(api.ConfigSchema)
	return err
}
