package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

type versionCmd struct{}

func (c *versionCmd) Run(ctx context.Context, args []string) error {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	fmt.Println("fencegate", v)
	return nil
}
