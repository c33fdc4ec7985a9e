package config

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzLoad checks that no input makes the loader panic, and that whatever
// loads survives Marshal and loads back equal. Its seeds are in
// testdata/fuzz/FuzzLoad.
func FuzzLoad(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, strict := range []bool{false, true} {
			cfg, err := ParseEmulatorConfig(data, Options{Strict: strict})
			if err != nil {
				if cfg != nil {
					t.Fatal("config returned with an error")
				}
				if err.Error() == "" {
					t.Fatal("empty error message")
				}
				continue
			}
			_ = cfg.ForwardTargets()
			out, err := cfg.Marshal()
			if err != nil {
				t.Fatalf("Marshal of a loaded config: %v", err)
			}
			back, err := ParseEmulatorConfig(out, Options{Strict: strict})
			if err != nil {
				t.Fatalf("reloading Marshal's output: %v\n%s", err, out)
			}
			for _, w := range back.Warnings {
				if w.Path != "UserConfig.Logging.Type" { // Marshal writes Type as loaded
					t.Fatalf("Marshal's output has a warning: %v\n%s", &w, out)
				}
			}
			cfg.Warnings, back.Warnings = nil, nil
			if !reflect.DeepEqual(cfg, back) {
				t.Fatalf("round trip changed the configuration:\n%s", out)
			}
		}
	})
}

// corpusString decodes a "go test fuzz v1" file holding one []byte value.
func corpusString(t *testing.T, name string, b []byte) string {
	t.Helper()
	lines := strings.SplitN(string(b), "\n", 2)
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a fuzz corpus file", name)
	}
	v := strings.TrimSpace(lines[1])
	if !strings.HasPrefix(v, "[]byte(") || !strings.HasSuffix(v, ")") {
		t.Fatalf("%s: not a []byte value", name)
	}
	s, err := strconv.Unquote(v[len("[]byte(") : len(v)-1])
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

// FuzzParseMinFreeDisk checks that no --min-free-disk value makes the
// parser panic or return an out-of-range watermark. Its seeds are in
// testdata/fuzz/FuzzParseMinFreeDisk.
func FuzzParseMinFreeDisk(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string) {
		b, p, err := ParseMinFreeDisk(v)
		if err != nil {
			if b != 0 || p != 0 || err.Error() == "" {
				t.Fatalf("%q: %d, %v with error %v", v, b, p, err)
			}
			return
		}
		if b < -1 || p < 0 || p > 100 || p != p || (b != 0 && p != 0) {
			t.Fatalf("%q: out of range: %d bytes, %v %%", v, b, p)
		}
	})
}

// FuzzStoreURL: --store takes "" or a postgres:// URL and nothing else.
func FuzzStoreURL(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string) {
		got, err := storeURL(v)
		if err != nil {
			if got != "" || err.Error() == "" {
				t.Fatalf("%q: %q with error %v", v, got, err)
			}
			return
		}
		if got != "" && !strings.HasPrefix(got, "postgres://") && !strings.HasPrefix(got, "postgresql://") {
			t.Fatalf("%q accepted as %q", v, got)
		}
	})
}

// FuzzNodeID: --node-id is 1 to 64 letters, digits, '.', '_' and '-',
// and nothing else is accepted; a refusal always says why.
func FuzzNodeID(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string) {
		msg := checkNodeID(v)
		ok := len(v) >= 1 && len(v) <= 64
		for _, r := range v {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
				ok = false
			}
		}
		if (msg == "") != ok {
			t.Fatalf("%q: accepted %v, message %q", v, msg == "", msg)
		}
	})
}
