package frames

import (
	"bufio"
	"bytes"
	"reflect"
	"testing"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// TestReadFrameFirstOfMany: a large transfer that opens a delivery with
// more to come (delivery-id, more=true) is read into a reassembly buffer
// with room for a second frame; a continuation, a whole delivery in one
// frame and a small first frame keep buffers of their own size, and a
// reader whose buffer cannot hold the leading fields reads the usual way.
func TestReadFrameFirstOfMany(t *testing.T) {
	PoisonReleased(true)
	t.Cleanup(func() { PoisonReleased(false) })
	large := bytes.Repeat([]byte("f"), MaxPooledBody-100)
	cases := []struct {
		name    string
		tr      *Transfer
		bufSize int
		wantCap int
	}{
		{"first of many", &Transfer{Handle: 1, DeliveryID: Ptr[uint32](7), DeliveryTag: bytes.Repeat([]byte{9}, 32), MessageFormat: Ptr[uint32](0), More: true, Payload: large}, 4096, ReassemblyCap},
		{"first of many, settled, wide numbers", &Transfer{Handle: 1 << 30, DeliveryID: Ptr[uint32](1 << 31), DeliveryTag: []byte{1}, MessageFormat: Ptr[uint32](1 << 31), Settled: true, More: true, Payload: large[:MaxPooledBody/2+1]}, 4096, ReassemblyCap},
		{"continuation", &Transfer{Handle: 1, More: true, Payload: large}, 4096, MaxPooledBody},
		{"last", &Transfer{Handle: 1, Payload: large}, 4096, MaxPooledBody},
		{"whole in one frame", &Transfer{Handle: 1, DeliveryID: Ptr[uint32](7), DeliveryTag: []byte{1}, Payload: large}, 4096, MaxPooledBody},
		{"small first", &Transfer{Handle: 1, DeliveryID: Ptr[uint32](7), DeliveryTag: []byte{1}, More: true, Payload: large[:1000]}, 4096, 1024},
		{"tiny reader", &Transfer{Handle: 1, DeliveryID: Ptr[uint32](7), DeliveryTag: []byte("a tag longer than the reader"), More: true, Payload: large}, 16, MaxPooledBody},
		{"aborted first", &Transfer{Handle: 1, DeliveryID: Ptr[uint32](7), DeliveryTag: []byte{1}, More: true, Aborted: true, Payload: large}, 4096, ReassemblyCap},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := bufio.NewReaderSize(bytes.NewReader(appendFrame(t, 0, c.tr)), c.bufSize)
			f, err := ReadFrame(r, 0)
			if err != nil {
				t.Fatal(err)
			}
			tr := f.Body.(*Transfer)
			if tr.Buf == nil || cap(tr.Buf.Bytes()) != c.wantCap {
				t.Fatalf("buffer of capacity %d; want %d", cap(tr.Buf.Bytes()), c.wantCap)
			}
			if got := unpooled(t, f).Body; !reflect.DeepEqual(got, c.tr) {
				t.Fatalf("read as %v; want %v", got, c.tr)
			}
			tr.Buf.Release()
		})
	}
}

// TestReadFrameFirstOfManyMalformed: a large transfer whose leading
// fields say "first of many" but whose performative is malformed further
// on, and one whose leading fields are malformed, fail as ParseBody
// fails them, and the reader is not left mid-frame by the peek.
func TestReadFrameFirstOfManyMalformed(t *testing.T) {
	PoisonReleased(true)
	t.Cleanup(func() { PoisonReleased(false) })
	payload := bytes.Repeat([]byte("m"), MaxPooledBody-100)
	good := appendFrame(t, 0, &Transfer{Handle: 1, DeliveryID: Ptr[uint32](7), DeliveryTag: []byte{1}, More: true, RcvSettleMode: Ptr(ReceiverSettleModeFirst), Payload: payload})
	// The performative: descriptor (3), list8 constructor, size, count,
	// handle (smalluint, 2 bytes), delivery-id (smalluint at offset 8),
	// tag, format null, settled null, more true, rcv-settle-mode (ubyte).
	const body = HeaderSize
	i := bytes.Index(good[body:], []byte{encoding.TypeCodeUbyte, 0}) + body
	if i < body || good[i-1] != encoding.TypeCodeBoolTrue {
		t.Fatalf("rcv-settle-mode not found in % x", good[body:body+20])
	}
	badMode := bytes.Clone(good)
	badMode[i+1] = 9 // rcv-settle-mode 9
	badID := bytes.Clone(good)
	badID[body+8] = encoding.TypeCodeStr8 // delivery-id as a string
	for name, frame := range map[string][]byte{"rcv-settle-mode": badMode, "delivery-id": badID} {
		t.Run(name, func(t *testing.T) {
			_, want := ParseBody(frame[body:])
			if want == nil {
				t.Fatal("ParseBody takes the malformed body")
			}
			if leadsDelivery(frame[body:]) != (name == "rcv-settle-mode") {
				t.Fatalf("leadsDelivery %v", leadsDelivery(frame[body:]))
			}
			_, err := ReadFrame(bufio.NewReader(bytes.NewReader(frame)), 0)
			if err == nil || err.Error() != want.Error() {
				t.Fatalf("ReadFrame error %v; want %v", err, want)
			}
		})
	}
	// The reassembly buffer the failed frame took went back to the free
	// list (poisoned): a new frame reads right from it.
	f, err := ReadFrame(bufio.NewReader(bytes.NewReader(good)), 0)
	if err != nil || !bytes.Equal(f.Body.(*Transfer).Payload, payload) {
		t.Fatalf("good frame after the bad ones: %v", err)
	}
	f.Body.(*Transfer).Buf.Release()
}

// TestLeadsDelivery decodes the leading fields from a prefix of a body,
// as firstOfMany does with what it peeks.
func TestLeadsDelivery(t *testing.T) {
	for _, c := range []struct {
		tr   *Transfer
		want bool
	}{
		{&Transfer{Handle: 0, DeliveryID: Ptr[uint32](0), DeliveryTag: []byte{}, More: true}, true},
		{&Transfer{Handle: 0, DeliveryID: Ptr[uint32](0), DeliveryTag: []byte{}}, false},
		{&Transfer{Handle: 0, More: true}, false},
		{&Transfer{Handle: 0, DeliveryID: Ptr[uint32](3), More: true, State: &Received{SectionNumber: 1}}, true},
	} {
		b, err := c.tr.AppendAMQP(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := leadsDelivery(b); got != c.want {
			t.Errorf("%v: %v; want %v", c.tr, got, c.want)
		}
		// Cut inside the performative: never taken for a first frame.
		if leadsDelivery(b[:len(b)-1]) {
			t.Errorf("%v cut short: true", c.tr)
		}
	}
	fb, err := (&Flow{IncomingWindow: 1, Handle: Ptr[uint32](0), Drain: true}).AppendAMQP(nil)
	if err != nil || leadsDelivery(fb) {
		t.Errorf("a flow leads a delivery (%v)", err)
	}
}

// FuzzLeadsDelivery: whatever the bytes, leadsDelivery does not panic,
// and on a body that parses as a transfer it agrees with the parse.
// Seeds: testdata/fuzz/FuzzLeadsDelivery.
func FuzzLeadsDelivery(f *testing.F) {
	for _, tr := range []*Transfer{
		{Handle: 1, DeliveryID: Ptr[uint32](7), DeliveryTag: []byte{1, 2}, MessageFormat: Ptr[uint32](0), More: true, Payload: []byte("abc")},
		{Handle: 1, More: true, Payload: []byte("abc")},
		{Handle: 1, DeliveryID: Ptr[uint32](7), DeliveryTag: []byte{1}, Settled: true, Aborted: true},
	} {
		b, err := AppendFrame(nil, 0, tr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[HeaderSize:])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := leadsDelivery(data)
		b, err := ParseBody(data)
		if err != nil {
			return
		}
		tr, ok := b.(*Transfer)
		if want := ok && tr.DeliveryID != nil && tr.More; got != want {
			t.Fatalf("leadsDelivery %v; the parse %v", got, b)
		}
	})
}
