// Command genconfigschema writes api/config.schema.json from the config
// structs (package configschema). Run by `go generate ./api`.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/fencegate/fencegate/api/internal/configschema"
)

func main() {
	out := flag.String("o", "config.schema.json", "output file")
	dir := flag.String("config", "../config", "source directory of package config")
	flag.Parse()
	b, err := configschema.Generate(*dir)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		log.Fatal(err)
	}
}
