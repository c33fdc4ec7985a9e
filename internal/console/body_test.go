package console

import (
	"bytes"
	"strings"
	"testing"
)

func TestDecodeBody(t *testing.T) {
	b := decodeBody(encodeDataBody([]byte(`{"a": {"b": [1, "x"]}}`)))
	if b.Kind != "data" || b.Guess != "json" || !strings.Contains(b.Render("json"), "\n  \"a\": {") {
		t.Fatalf("%+v %q", b, b.Render("json"))
	}
	if v, ok := jsonPath(b.Bytes, "$.a.b[1]"); !ok || v != "x" {
		t.Fatalf("json path: %q %v", v, ok)
	}
	if v, ok := jsonPath(b.Bytes, "a.b[0]"); !ok || v != "1" {
		t.Fatalf("json path: %q %v", v, ok)
	}
	if _, ok := jsonPath(b.Bytes, "$.a.c"); ok {
		t.Fatal("a missing key matched")
	}
	// An amqp-value string (0x77, then str8).
	v := decodeBody([]byte{0x00, 0x53, 0x77, 0xa1, 3, 'a', 'b', 'c'})
	if v.Kind != "value" || v.Text != "abc" {
		t.Fatalf("%+v", v)
	}
	x := decodeBody(encodeDataBody([]byte("<a><b>1</b></a>")))
	if x.Guess != "xml" || !strings.Contains(x.Render("xml"), "\n  <b>1</b>") {
		t.Fatalf("xml: %q", x.Render("xml"))
	}
	r := decodeBody([]byte{0x01, 0x02})
	if r.Kind != "raw" || r.Guess != "hex" || !strings.Contains(r.Render("hex"), "01 02") {
		t.Fatalf("raw: %+v", r)
	}
}

// FuzzDecodeBody: any stored body decodes without panicking and renders
// in every view; a data body comes back as it was.
func FuzzDecodeBody(f *testing.F) {
	f.Add(encodeDataBody([]byte(`{"id": 1}`)))
	f.Add([]byte{0x00, 0x53, 0x77, 0xa1, 3, 'a', 'b', 'c'})
	f.Add([]byte{0x00, 0x53, 0x76, 0x45})
	f.Fuzz(func(t *testing.T, raw []byte) {
		b := decodeBody(raw)
		for _, v := range []string{"json", "xml", "text", "hex"} {
			_ = b.Render(v)
		}
		if got := decodeBody(encodeDataBody(raw)); !bytes.Equal(got.Bytes, raw) {
			t.Fatalf("data body %x came back as %x", raw, got.Bytes)
		}
	})
}

// FuzzJSONPath: any document and path evaluate without panicking.
func FuzzJSONPath(f *testing.F) {
	f.Add([]byte(`{"a": [1, {"b": "c"}]}`), "$.a[1].b")
	f.Add([]byte(`[1,2]`), "[5]")
	f.Fuzz(func(t *testing.T, doc []byte, path string) {
		_, _ = jsonPath(doc, path)
	})
}
