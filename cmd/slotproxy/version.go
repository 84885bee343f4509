package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release version, set when linking:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/slotproxy
//
// When empty, the module version recorded by "go install" is used, else
// "dev".
var version string

// runVersion implements "slotproxy version".
func runVersion(args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("version", "", "Print the version of slotproxy and of the Go toolchain that built it.")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "slotproxy %s (%s, %s/%s)\n", versionString(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

// versionString returns version, or the best substitute from the build info.
func versionString() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	v := "dev"
	if len(rev) >= 12 {
		v += "-" + rev[:12]
	}
	if dirty {
		v += "-dirty"
	}
	return v
}
