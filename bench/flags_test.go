package bench

import (
	"io"
	"testing"
)

// -w1-cells none leaves only the -sizes cells, and -w1-max-bytes lifts the
// byte cap of a W1 cell (for 64 KB cells long enough to profile).
func TestW1CellFlags(t *testing.T) {
	f, code := parseFlags([]string{"-w1-cells", "none", "-sizes", "65536", "-w1-max-bytes", "4294967296"}, io.Discard)
	if f == nil {
		t.Fatalf("parseFlags: exit %d", code)
	}
	p, err := f.plan()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.W1Windows) != 0 || len(p.W1Sizes) != 1 || p.W1Sizes[0] != 65536 || p.W1MaxBytes != 4<<30 {
		t.Fatalf("plan: windows %v, sizes %v, max bytes %d", p.W1Windows, p.W1Sizes, p.W1MaxBytes)
	}
	f, _ = parseFlags(nil, io.Discard)
	if p, _ = f.plan(); len(p.W1Windows) == 0 || p.W1MaxBytes != 1<<30 {
		t.Fatalf("default plan: windows %v, max bytes %d", p.W1Windows, p.W1MaxBytes)
	}
}
