package bench

import "testing"

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
