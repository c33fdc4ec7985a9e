package version

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.99.0",
		Main:      debug.Module{Path: "github.com/busbarmq/busbar", Version: "v0.0.0-20261126-abcdef"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abcdef0123456789"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		name             string
		ldVersion, ldRev string
		bi               *debug.BuildInfo
		want             Info
	}{
		{"build info", "", "", bi, Info{Version: "v0.0.0-20261126-abcdef", Commit: "abcdef0123456789", Modified: true, GoVersion: "go1.99.0"}},
		{"ldflags win", "v1.2.3", "feedface", bi, Info{Version: "v1.2.3", Commit: "feedface", GoVersion: "go1.99.0"}},
		{"ldflags version only", "v1.2.3", "", bi, Info{Version: "v1.2.3", Commit: "abcdef0123456789", Modified: true, GoVersion: "go1.99.0"}},
		{"nothing known", "", "", &debug.BuildInfo{GoVersion: "go1.99.0"}, Info{Version: "(devel)", Commit: "unknown", GoVersion: "go1.99.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.ldVersion, tc.ldRev, tc.bi)
			if got != tc.want {
				t.Errorf("resolve = %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := resolve("", "", nil); got.Version != "(devel)" || got.Commit != "unknown" || got.GoVersion == "" {
		t.Errorf("resolve without build info = %+v", got)
	}
}

func TestString(t *testing.T) {
	i := Info{Version: "v1.2.3", Commit: "abc", Modified: true, GoVersion: "go1.99.0"}
	if got, want := i.String(), "v1.2.3 (commit abc, modified, go1.99.0)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

func TestGetIsStable(t *testing.T) {
	if a, b := Get(), Get(); a != b || Version() != Get().Version || Commit() != Get().Commit {
		t.Error("Get is not stable")
	}
}
