// Package version says which build of Busbar is running: the version, the
// source revision and whether the tree had uncommitted changes. The
// `busbar version` command, the start-up log line, the /health body and the
// build-info metric all read it from here.
//
// Where the values come from, first match wins:
//
//   - Release builds set them with the linker (see docs/running.md):
//     -ldflags "-X github.com/busbarmq/busbar/internal/version.version=v1.2.3
//     -X github.com/busbarmq/busbar/internal/version.commit=<git hash>".
//   - Otherwise the Go toolchain's build information
//     (runtime/debug.ReadBuildInfo): the main module's version ("v1.2.3"
//     when built by `go install module@v1.2.3`, "(devel)" or a
//     pseudo-version in a checkout), and the vcs.revision and vcs.modified
//     settings `go build` records inside a git checkout.
//   - "(devel)" and "unknown" when neither says anything (go test, for one).
package version

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Set with -ldflags "-X …" (see the package doc); empty means "ask the
// build information".
var (
	version string
	commit  string
)

// Info is what is known about the running build.
type Info struct {
	// Version is the release ("v1.2.3"), a Go pseudo-version, or "(devel)".
	Version string
	// Commit is the source revision (a git hash), or "unknown".
	Commit string
	// Modified is true when the build had uncommitted changes.
	Modified bool
	// GoVersion is the toolchain that built the binary ("go1.24.1").
	GoVersion string
}

var (
	once   sync.Once
	cached Info
)

// Get returns the running build's Info. It is computed once.
func Get() Info {
	once.Do(func() {
		bi, _ := debug.ReadBuildInfo()
		cached = resolve(version, commit, bi)
	})
	return cached
}

// resolve applies the precedence of the package doc.
func resolve(ldVersion, ldCommit string, bi *debug.BuildInfo) Info {
	info := Info{Version: ldVersion, Commit: ldCommit, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		if info.Version == "" && bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if info.Commit == "" {
					info.Commit = s.Value
				}
			case "vcs.modified":
				// An ldflags commit names a clean release tree; the
				// flag belongs to whatever revision the toolchain saw.
				if ldCommit == "" {
					info.Modified = s.Value == "true"
				}
			}
		}
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// Version is Get().Version.
func Version() string { return Get().Version }

// Commit is Get().Commit.
func Commit() string { return Get().Commit }

// String is one line for people: "v1.2.3 (commit 0123abcd…, modified, go1.24.1)".
func (i Info) String() string {
	s := i.Version + " (commit " + i.Commit
	if i.Modified {
		s += ", modified"
	}
	return s + ", " + i.GoVersion + ")"
}
