package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is stamped at build time by the Makefile
// (-ldflags "-X main.version=$(git describe --tags --always --dirty)");
// a plain `go build` falls back to the VCS details Go records in the binary.
var version string

// buildVersion names the build: the stamped version, else the module
// version (`go install …@v1.2.3`), else the commit Go recorded, else "devel".
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	return "devel-" + rev[:min(12, len(rev))] + dirty
}

func runVersion(stdout io.Writer) error {
	_, err := fmt.Fprintf(stdout, "dispatcher %s (%s %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}
