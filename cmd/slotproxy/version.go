package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version and commit are the release version (a tag, "git describe") and
// the commit it was built from, set when linking, as the Makefile does:
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=0123abcd…" ./cmd/slotproxy
//
// When empty, the build information stands in: the module version that
// "go install" or a VCS-stamped build records, and the VCS revision (with
// -dirty for uncommitted changes); "dev" and "unknown" when there is none
// (a build with -buildvcs=false or outside a repository).
var version, commit string

// runVersion implements "slotproxy version".
func runVersion(args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("version", "", "Print the version of slotproxy, the commit it was built from, and the Go\ntoolchain that built it.")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "slotproxy %s (commit %s, %s, %s/%s)\n", versionString(), commitString(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

// versionString returns version, or the best substitute from the build info.
func versionString() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			return v
		}
	}
	return "dev"
}

// commitString returns commit, or the VCS revision from the build info
// ("-dirty" when the tree had changes), else "unknown".
func commitString() string {
	if commit != "" {
		return commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
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
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
