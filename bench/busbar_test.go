package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTopicsAvailable reads the source tree: this checkout has topics, a
// tree whose broker has no CreateTopic has not, and a missing tree says so.
func TestTopicsAvailable(t *testing.T) {
	if got := topicsAvailable(".."); got != "" {
		t.Fatalf("this checkout: %q", got)
	}
	old := t.TempDir()
	if err := os.MkdirAll(filepath.Join(old, "internal", "broker"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "internal", "broker", "queue.go"), []byte("package broker\n\nfunc (b *Broker) CreateQueue() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := topicsAvailable(old); got != "n/a (topics not yet available)" {
		t.Fatalf("a broker without topics: %q", got)
	}
	if got := topicsAvailable(t.TempDir()); !strings.Contains(got, "not checked") {
		t.Fatalf("no source tree: %q", got)
	}
}
