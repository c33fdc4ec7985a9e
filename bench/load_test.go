package bench

import (
	"testing"
	"time"
)

// body copies its filler: the bytes are those of the byte-by-byte
// definition, a..z repeated after the 16-byte header.
func TestBody(t *testing.T) {
	for _, size := range []int{0, 10, 16, 100, 4108, 5000, 64 << 10} {
		b := body(size, 7, 9)
		if len(b) != size {
			t.Fatalf("body(%d) has %d bytes", size, len(b))
		}
		for i := range b {
			if i < 16 && size >= 16 {
				continue
			}
			if b[i] != byte('a'+i%26) {
				t.Fatalf("body(%d)[%d] = %q, want %q", size, i, b[i], byte('a'+i%26))
			}
		}
	}
}

func BenchmarkBody1K(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		body(1024, int64(i), uint64(i))
	}
}

// machineCPU reads /proc/stat's cpu line; the meter's steal share is a
// percentage of the machine's time since its mark.
func TestMachineCPU(t *testing.T) {
	all0, steal0, ok := machineCPU()
	if !ok {
		t.Fatal("cannot read /proc/stat")
	}
	if all0 <= 0 || steal0 < 0 || steal0 > all0 {
		t.Fatalf("all %d steal %d", all0, steal0)
	}
	m := &meter{t: &Target{}}
	m.mark()
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	all1, steal1, _ := machineCPU()
	if all1 <= all0 || steal1 < steal0 {
		t.Errorf("not monotonic: all %d → %d, steal %d → %d", all0, all1, steal0, steal1)
	}
	if p := m.stealPct(); p < 0 || p > 100 {
		t.Errorf("steal %.1f %%", p)
	}
	m.steal0 = -1
	if p := m.stealPct(); p != -1 {
		t.Errorf("unknown start: steal %.1f %%, want -1", p)
	}
	for _, c := range []struct {
		all0, steal0, all, steal int64
		want                     float64
	}{
		{100, 10, 200, 30, 20},
		{100, 10, 100, 10, 0}, // within one tick (the smoke's 7 ms cells)
		{-1, -1, 200, 30, -1}, // unknown start
		{300, 10, 200, 30, -1},
	} {
		if got := stealShare(c.all0, c.steal0, c.all, c.steal); got != c.want {
			t.Errorf("stealShare(%d, %d, %d, %d) = %v, want %v", c.all0, c.steal0, c.all, c.steal, got, c.want)
		}
	}
}
