package lint

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// outsideRef matches a reference to a document that is not in the
// repository: the team's research notes (by file name or section prefix),
// their directory, or the seed pages they were drawn from. What Busbar
// implements is described under docs/wire/; comments point there.
var outsideRef = regexp.MustCompile(strings.Join([]string{
	`amqp` + `-wire`,
	`performance` + `\.md`,
	`management` + `-and-rules`,
	`landscape` + `\.md`,
	`scale` + `-out\.md`,
	`aesthetics` + `\.md`,
	`\.\./[s]hared`,
	`/[w]ork/[s]hared`,
	`[s]eed [0-9]{3}`,
	`[s]eeds?/`,
}, "|"))

// TestNoReferencesOutsideTheRepository fails when a Go file, Markdown page
// or shell script of the repository points at a document outside the
// repository.
func TestNoReferencesOutsideTheRepository(t *testing.T) {
	root, files := trackedFiles(t)
	checked := 0
	for _, f := range files {
		if !strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, ".md") && !strings.HasSuffix(f, ".sh") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		checked++
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			if m := outsideRef.FindString(sc.Text()); m != "" {
				t.Errorf("%s:%d refers to %q outside the repository; point at docs/wire/ instead", f, n, m)
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d files; is the file list right?", checked)
	}
}

func TestOutsideRefPattern(t *testing.T) {
	for _, s := range []string{
		"(amqp" + "-wire §2.4)", "see performance" + ".md §5", "management-and" + "-rules.md §1.9",
		strings.Join([]string{"..", "sha" + "red", "docs", "x"}, "/"), "se" + "ed 001", strings.Join([]string{"se" + "eds", "003.txt"}, "/"),
	} {
		if !outsideRef.MatchString(s) {
			t.Errorf("%q not caught", s)
		}
	}
	for _, s := range []string{"docs/wire/amqp.md §2.4", "docs/benchmarks.md", "a seed of 7", "shared access"} {
		if outsideRef.MatchString(s) {
			t.Errorf("%q caught", s)
		}
	}
}

// trackedFiles returns the repository root (two levels above this
// package) and the files under it, leaving out hidden directories (.git)
// and installed dependencies (node_modules, Python virtual environments).
func trackedFiles(t *testing.T) (string, []string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found: %v", err)
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "venv" || name == "__pycache__" || name == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root, files
}
