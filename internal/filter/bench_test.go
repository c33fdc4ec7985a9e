package filter

import "testing"

func benchMatch(b *testing.B, src string) {
	f, err := CompileSQL(src, evalParams)
	if err != nil {
		b.Fatal(err)
	}
	env := testEnv()
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := f.Match(env); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkMatchSimple(b *testing.B) {
	benchMatch(b, "color = 'red'")
}

func BenchmarkMatchComplex(b *testing.B) {
	benchMatch(b, "Quantity > 10 AND price < 3.5 AND color LIKE 'r%' AND sys.Label LIKE '%bus%' AND sys.To IN ('billing', 'orders')")
}

// BenchmarkMatchMissing looks up a property the message lacks, which
// scans the properties for a case-insensitive match.
func BenchmarkMatchMissing(b *testing.B) {
	benchMatch(b, "missing IS NULL")
}

func BenchmarkMatchCorrelation(b *testing.B) {
	c := &CorrelationFilter{To: "orders", Label: "bus-label", Properties: map[string]any{"color": "red", "Quantity": 15}}
	env := testEnv()
	b.ReportAllocs()
	for b.Loop() {
		if ok, _ := c.Match(env); !ok {
			b.Fatal("no match")
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CompileSQL("Quantity > 10 AND price < 3.5 AND color LIKE 'r%' AND sys.Label LIKE '%bus%'", nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkApply(b *testing.B) {
	a, err := CompileAction("SET quantity = quantity / 2; REMOVE priority; SET sys.CorrelationId = 'low'", nil)
	if err != nil {
		b.Fatal(err)
	}
	env := testEnv()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Apply(env); err != nil {
			b.Fatal(err)
		}
	}
}
