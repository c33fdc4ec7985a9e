package broker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// harnessScript has one right and one deliberately wrong expectation, and
// comments that -rewrite must keep.
const harnessScript = `# a comment

create-queue q lock=30s
----
ok

# another comment
send q a b
----
ok

receive q n=2
----
seq=1 body=a dc=1 lock=+30s
seq=2 body=WRONG dc=1 lock=+30s

state q
----
`

const harnessFixed = `# a comment

create-queue q lock=30s
----
ok

# another comment
send q a b
----
ok

receive q n=2
----
seq=1 body=a dc=1 lock=+30s
seq=2 body=b dc=1 lock=+30s

state q
----
active=2
`

func TestScriptHarness(t *testing.T) {
	defer goleak.VerifyNone(t)

	// A wrong expectation is a mismatch, reported with its line.
	res, err := runScript(harnessScript)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.mismatches) != 2 {
		t.Fatalf("mismatches %+v, want 2 (receive and state)", res.mismatches)
	}
	m := res.mismatches[0]
	if m.line != 12 || m.cmd != "receive q n=2" || !strings.Contains(m.got, "body=b") || !strings.Contains(m.want, "WRONG") {
		t.Fatalf("mismatch %+v", m)
	}
	if res.rewritten != harnessFixed {
		t.Fatalf("rewritten:\n%s\nwant:\n%s", res.rewritten, harnessFixed)
	}

	// -rewrite writes the file with the actual output; then it passes.
	file := filepath.Join(t.TempDir(), "h.txt")
	if err := os.WriteFile(file, []byte(harnessScript), 0o644); err != nil {
		t.Fatal(err)
	}
	runScriptFile(t, file, true)
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != harnessFixed {
		t.Fatalf("rewritten file:\n%s", got)
	}
	runScriptFile(t, file, false)

	// Faults of the script are errors, never output.
	for _, bad := range []string{
		"frobnicate q\n----\nok\n",                         // unknown command
		"create-queue q\nok\n",                             // no ----
		"----\nok\n",                                       // no command
		"create-queue q lokc=30s\n----\nok\n",              // unknown argument
		"create-queue q lock=soon\n----\nok\n",             // bad value
		"create-queue q\n----\n\ncomplete q seq=1\n----\n", // no token received
		"send q \"a\n----\n",                               // unterminated quote
	} {
		if _, err := runScript(bad); err == nil {
			t.Errorf("script %q: no error", bad)
		}
	}
}

// FuzzParseScript: parsing never panics, and a parsed script rewritten
// with its own expected output is the script itself (what -rewrite relies
// on to keep comments and commands). Command lines never panic the
// argument parser.
func FuzzParseScript(f *testing.F) {
	f.Add(harnessScript)
	f.Add(harnessFixed)
	f.Add("send q \"a b\" props=k:v,n:1 at=-1m\n----\nok\n\n# c\n")
	f.Add("x\n----\n\n\n----\n")
	f.Fuzz(func(t *testing.T, src string) {
		lines, blocks, err := parseScript(src)
		if err != nil {
			return
		}
		var wants []string
		for _, b := range blocks {
			wants = append(wants, b.want)
			if a, err := parseScriptArgs(b.cmd); err == nil && a.name == "" && len(a.words) == 0 && len(a.kv) == 0 {
				t.Fatalf("command %q parsed as nothing", b.cmd)
			}
		}
		want := strings.Join(lines, "\n") + "\n"
		if got := rewriteScript(lines, blocks, wants); got != want {
			t.Fatalf("rewritten with its own output:\n%q\nwant\n%q", got, want)
		}
	})
}
