// Command genschema writes api/config.schema.json from the config
// structs (package schemagen). Run by `go generate ./config`.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/fencegate/fencegate/config/internal/schemagen"
)

func main() {
	out := flag.String("o", "../api/config.schema.json", "output file")
	dir := flag.String("config", ".", "source directory of package config")
	flag.Parse()
	b, err := schemagen.Generate(*dir)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		log.Fatal(err)
	}
}
