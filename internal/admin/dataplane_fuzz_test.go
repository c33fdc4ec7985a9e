package admin

import (
	"bytes"
	"testing"

	"github.com/busbarmq/busbar/internal/message"
)

// FuzzDataPlaneBody: decoding a stored AMQP body never panics, and a data
// section this package encodes decodes back to its payload. The corpus is
// in testdata/fuzz/FuzzDataPlaneBody.
func FuzzDataPlaneBody(f *testing.F) {
	f.Add([]byte{0x00, 0x53, 0x75, 0xa0, 0x02, 'h', 'i'})
	f.Add([]byte{0x00, 0x53, 0x77, 0xa1, 0x02, 'h', 'i'})
	f.Add(encodeDataBody(bytes.Repeat([]byte("x"), 300)))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, ok := decodeAMQPBody(b); !ok && len(b) == 0 {
			t.Fatal("an empty body is not ok")
		}
		got, ok := decodeAMQPBody(encodeDataBody(b))
		if !ok || !bytes.Equal(got, b) {
			t.Fatalf("round trip of %x: %x, %v", b, got, ok)
		}
	})
}

// FuzzDataPlaneProperties: BrokerProperties headers, custom-property
// values and batch bodies from a client never panic; what a batch yields
// is within bounds. The corpus is in testdata/fuzz/FuzzDataPlaneProperties.
func FuzzDataPlaneProperties(f *testing.F) {
	f.Add(`{"Label":"M1","TimeToLive":10,"ScheduledEnqueueTimeUtc":"Sun, 06 Nov 1994 08:49:37 GMT"}`)
	f.Add(`[{"Body":"a","BrokerProperties":{"TimeToLiveTimeSpan":"1.02:03:04.5"},"UserProperties":{"n":1e400}}]`)
	f.Add(`"quoted \u00e9"`)
	f.Fuzz(func(t *testing.T, s string) {
		var m message.Message
		_ = parseBrokerProps(s, &m)
		_ = parsePropValue(s)
		_, _ = parseTimeSpan(s)
		if msgs, err := parseBatch([]byte(s), 10); err == nil && (len(msgs) == 0 || len(msgs) > 10) {
			t.Fatalf("batch of %d messages accepted", len(msgs))
		}
		if v := formatPropValue(s); bytes.ContainsAny([]byte(v), "\r\n") {
			t.Fatalf("header value %q holds a line break", v)
		}
	})
}
