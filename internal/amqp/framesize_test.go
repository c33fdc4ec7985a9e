package amqp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// TestDefaultMaxFrameSize checks the open: 65536, what Service Bus
// advertises. Clients on Azure's C uamqp (the Python SDK) split their
// transfers by the peer's max-frame-size but encode nothing larger than
// their own 65536, so a larger value makes every send over 64 KiB fail
// inside such a client.
func TestDefaultMaxFrameSize(t *testing.T) {
	_, addr := startServer(t, newTestBroker(), Config{})
	r := dialRaw(t, addr)
	if o := r.handshake(nil); o.MaxFrameSize != 65536 {
		t.Fatalf("open advertises max-frame-size %d; want 65536", o.MaxFrameSize)
	}
}

// TestFrameSizeNegotiation moves a 256 KiB delivery both ways for clients
// advertising more, as much as, and less than the server's 65536: the
// client's frames of exactly 65536 bytes are taken and reassembled, and
// every frame the server sends fits the smaller of the two opens.
func TestFrameSizeNegotiation(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{MaxMessageSize: 1 << 20})
	payload := make([]byte, 256<<10)
	for i := range payload {
		payload[i] = byte(i * 31)
	}
	for _, peer := range []uint32{1 << 20, 65536, 2048} {
		t.Run(fmt.Sprint(peer), func(t *testing.T) {
			q := fmt.Sprintf("big-%d", peer)
			r := dialRaw(t, addr)
			r.handshake(&frames.Open{ContainerID: "raw", MaxFrameSize: peer})
			limit := min(peer, DefaultMaxFrameSize)

			// A window wide enough for the 2048-byte frames of a whole delivery.
			r.send(0, &frames.Begin{IncomingWindow: 1000, OutgoingWindow: 1000})
			if _, ok := r.nextWithin(limit).(*frames.Begin); !ok {
				t.Fatal("no begin reply")
			}
			r.attachSender(0, "s", q)
			n := r.transferSplit(0, 0, payload, DefaultMaxFrameSize)
			if n < 5 {
				t.Fatalf("sent in %d frames", n)
			}
			d, ok := r.nextWithin(limit).(*frames.Disposition)
			if !ok || d.First != 0 || !d.Settled {
				t.Fatalf("got %v; want the disposition of delivery 0", d)
			}
			if _, ok := d.State.(*frames.Accepted); !ok {
				t.Fatalf("delivery state %v; want accepted", d.State)
			}

			r.attachReceiver(1, "r", q)
			r.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 1000, OutgoingWindow: 1000,
				Handle: ptr(uint32(1)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(1))})
			var got []byte
			frameCount := 0
			for {
				tr, ok := r.nextWithin(limit).(*frames.Transfer)
				if !ok || tr.Handle != 1 {
					t.Fatalf("got %v; want a transfer on handle 1", tr)
				}
				frameCount++
				got = append(got, tr.Payload...)
				if !tr.More {
					break
				}
			}
			if !bytes.Equal(got, payload) {
				t.Fatalf("received %d bytes, not the %d sent", len(got), len(payload))
			}
			if want := len(payload) / int(limit); frameCount <= want {
				t.Fatalf("received in %d frames; want more than %d", frameCount, want)
			}
		})
	}
}

// TestFrameOverMaxFrameSize closes the connection of a client whose frame
// exceeds the advertised 65536 by one byte, with amqp:connection:framing-error.
func TestFrameOverMaxFrameSize(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{MaxMessageSize: 1 << 20})
	r := dialRaw(t, addr)
	r.handshake(&frames.Open{ContainerID: "raw", MaxFrameSize: 1 << 20})
	r.begin()
	r.attachSender(0, "s", "q")
	id := uint32(0)
	tr := &frames.Transfer{Handle: 0, DeliveryID: &id, DeliveryTag: []byte{0}, MessageFormat: ptr(uint32(0))}
	head, err := frames.AppendFrame(nil, 0, tr)
	if err != nil {
		t.Fatal(err)
	}
	tr.Payload = make([]byte, DefaultMaxFrameSize+1-len(head))
	frame, err := frames.AppendFrame(nil, 0, tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(frame) != DefaultMaxFrameSize+1 {
		t.Fatalf("frame of %d bytes", len(frame))
	}
	r.write(frame)
	r.expectClose(CondFramingError)
	checkServing(t, addr)
}

// nextWithin reads the next frame that is not a heartbeat and fails the
// test if the frame is larger than limit.
func (r *rawClient) nextWithin(limit uint32) frames.Body {
	r.t.Helper()
	for {
		_ = r.nc.SetReadDeadline(time.Now().Add(testTimeout))
		fr, err := frames.ReadFrame(r.br, limit)
		if err != nil {
			r.t.Fatalf("raw read (max-frame-size %d): %v", limit, err)
		}
		if fr.Body != nil {
			return fr.Body
		}
	}
}

// transferSplit sends payload as one delivery in frames of at most max
// bytes, each but the last exactly max, and returns the number of frames.
func (r *rawClient) transferSplit(handle, id uint32, payload []byte, max int) int {
	r.t.Helper()
	n := 0
	first := true
	for first || len(payload) > 0 {
		tr := &frames.Transfer{Handle: handle}
		if first {
			tr.DeliveryID, tr.DeliveryTag, tr.MessageFormat = &id, binary.BigEndian.AppendUint32(nil, id), ptr(uint32(0))
		}
		tr.More = true
		head, err := frames.AppendFrame(nil, 0, tr)
		if err != nil {
			r.t.Fatal(err)
		}
		room := max - len(head)
		if room >= len(payload) {
			tr.More = false
			room = len(payload)
		}
		tr.Payload = payload[:room]
		b, err := frames.AppendFrame(nil, 0, tr)
		if err != nil {
			r.t.Fatal(err)
		}
		if len(b) > max || tr.More && len(b) != max {
			r.t.Fatalf("frame of %d bytes; want %d", len(b), max)
		}
		r.write(b)
		payload = payload[room:]
		first = false
		n++
	}
	return n
}

// TestTwoFrameMessages: a message split over two or three frames of
// 65536 bytes, gathered into a reassembly buffer from the free list,
// arrives whole, with released buffers poisoned so that a payload still
// aliasing a released buffer would show.
func TestTwoFrameMessages(t *testing.T) {
	frames.PoisonReleased(true)
	t.Cleanup(func() { frames.PoisonReleased(false) })
	b := newTestBroker()
	_, addr := startServer(t, b, Config{MaxMessageSize: 1 << 20})
	for _, size := range []int{65536 + 100, 100000, frames.ReassemblyCap - 200, frames.ReassemblyCap + 5000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			payload := make([]byte, size)
			for i := range payload {
				payload[i] = byte(i*7 + size)
			}
			q := fmt.Sprintf("two-%d", size)
			r := dialRaw(t, addr)
			r.handshake(nil)
			r.send(0, &frames.Begin{IncomingWindow: 1000, OutgoingWindow: 1000})
			if _, ok := r.next().(*frames.Begin); !ok {
				t.Fatal("no begin reply")
			}
			r.attachSender(0, "s", q)
			if n := r.transferSplit(0, 0, payload, DefaultMaxFrameSize); n < 2 {
				t.Fatalf("sent in %d frames", n)
			}
			if d, ok := r.next().(*frames.Disposition); !ok || d.First != 0 {
				t.Fatalf("got %v; want the disposition of delivery 0", d)
			}
			r.attachReceiver(1, "r", q)
			r.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 1000, OutgoingWindow: 1000,
				Handle: ptr(uint32(1)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(1))})
			var got []byte
			for {
				tr, ok := r.next().(*frames.Transfer)
				if !ok || tr.Handle != 1 {
					t.Fatalf("got %v; want a transfer on handle 1", tr)
				}
				got = append(got, tr.Payload...)
				if !tr.More {
					break
				}
			}
			if !bytes.Equal(got, payload) {
				t.Fatalf("received %d bytes, not the %d sent (or not the same)", len(got), len(payload))
			}
		})
	}
}

// TestGatherInPlace: the first frame of a delivery split over 65536-byte
// frames is kept as the start of its payload — the delivery's payload
// lies in that frame's own buffer, just past the frame's performative —
// and a second frame is appended in place; longer messages (three
// frames, many frames) and aborted ones (at the first frame, or after
// it) still come out right. Released buffers are poisoned, so a payload
// left aliasing one would show.
func TestGatherInPlace(t *testing.T) {
	frames.PoisonReleased(true)
	t.Cleanup(func() { frames.PoisonReleased(false) })
	type got struct {
		id      uint32
		payload []byte
		off     int // where the payload starts in the delivery's buffer; -1: not in it
	}
	gotc := make(chan got, 10)
	b := newTestBroker()
	b.intercept = func(d *IncomingDelivery) bool {
		g := got{id: d.ID, payload: bytes.Clone(d.Payload), off: -1}
		if d.buf != nil && len(d.Payload) > 0 {
			base := uintptr(unsafe.Pointer(unsafe.SliceData(d.buf.Bytes())))
			at := uintptr(unsafe.Pointer(unsafe.SliceData(d.Payload)))
			if c := uintptr(cap(d.buf.Bytes())); at >= base && at-base+uintptr(len(d.Payload)) <= c {
				g.off = int(at - base)
			}
		}
		d.Release()
		d.Settle(&frames.Accepted{})
		gotc <- g
		return true
	}
	_, addr := startServer(t, b, Config{MaxMessageSize: 4 << 20})
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.send(0, &frames.Begin{IncomingWindow: 1000, OutgoingWindow: 1000})
	if _, ok := r.next().(*frames.Begin); !ok {
		t.Fatal("no begin reply")
	}
	r.attachSender(0, "s", "q")
	// The offset of the payload in a first frame's body: the length of
	// the performative transferSplit writes.
	head := func(id uint32) int {
		p, err := (&frames.Transfer{Handle: 0, DeliveryID: &id, DeliveryTag: binary.BigEndian.AppendUint32(nil, id),
			MessageFormat: ptr(uint32(0)), More: true}).AppendAMQP(nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(p)
	}
	expect := func(id uint32, payload []byte, inPlace bool) {
		t.Helper()
		var g got
		select {
		case g = <-gotc:
		case <-time.After(testTimeout):
			t.Fatalf("delivery %d did not arrive", id)
		}
		if g.id != id || !bytes.Equal(g.payload, payload) {
			t.Fatalf("delivery %d of %d bytes; want %d of %d bytes as sent", g.id, len(g.payload), id, len(payload))
		}
		if inPlace && g.off != head(id) {
			t.Fatalf("delivery %d: payload at offset %d of its buffer; want %d, in its first frame's buffer", id, g.off, head(id))
		}
		if d, ok := r.next().(*frames.Disposition); !ok || d.First != id {
			t.Fatalf("got %v; want the disposition of delivery %d", d, id)
		}
	}
	msg := func(size int) []byte {
		p := make([]byte, size)
		for i := range p {
			p[i] = byte(i*7 + size)
		}
		return p
	}
	id := uint32(0)
	for _, c := range []struct {
		size, frames int
		inPlace      bool
	}{
		{65536 + 100, 2, true},
		{100000, 2, true},
		{frames.ReassemblyCap - 200, 2, true}, // the second frame just fits
		{frames.ReassemblyCap + 5000, 3, false},
		{3 << 20, 49, false}, // a long message: grown as before
	} {
		p := msg(c.size)
		if n := r.transferSplit(0, id, p, DefaultMaxFrameSize); n != c.frames {
			t.Fatalf("%d bytes sent in %d frames; want %d", c.size, n, c.frames)
		}
		expect(id, p, c.inPlace)
		id++
	}

	// Aborted at the first frame, and after a first frame kept in place:
	// neither is delivered, and the next message comes whole.
	r.send(0, &frames.Transfer{Handle: 0, DeliveryID: &id, DeliveryTag: []byte{1}, More: true, Aborted: true, Payload: msg(60000)})
	id++
	r.transfer(0, id, msg(60000), true)
	r.send(0, &frames.Transfer{Handle: 0, Aborted: true})
	id++
	p := msg(70000)
	r.transferSplit(0, id, p, DefaultMaxFrameSize)
	expect(id, p, true)
}

// readRecorder is a net.Conn that counts the bytes read into the
// connection's read buffer: the first read (the handshake's) fills that
// buffer from its start, and every later read into it is a fill.
type readRecorder struct {
	net.Conn
	mu       sync.Mutex
	buf      uintptr // start of the read buffer
	buffered int64   // bytes read into it
	direct   int64   // bytes read anywhere else
}

func (c *readRecorder) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	at := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	c.mu.Lock()
	if c.buf == 0 {
		c.buf = at
	}
	if at >= c.buf && at < c.buf+readBufferSize {
		c.buffered += int64(n)
	} else {
		c.direct += int64(n)
	}
	c.mu.Unlock()
	return n, err
}

func (c *readRecorder) counts() (buffered, direct int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buffered, c.direct
}

type recordingListener struct {
	net.Listener
	conns chan *readRecorder
}

func (l recordingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &readRecorder{Conn: nc}
	l.conns <- rc
	return rc, nil
}

// TestLargeFramesReadDirect: on a stream of 64 KB messages (a 65536-byte
// frame and a small one each), the frames' bytes go from the network
// straight into their own buffers, not through the connection's read
// buffer: what passes through it stays within the small fills that read
// the headers (largeFill), where filling it whole put half of every large
// frame through it. The messages arrive whole.
func TestLargeFramesReadDirect(t *testing.T) {
	b := newTestBroker()
	conns := make(chan *readRecorder, 1)
	_, addr := startServerOn(t, b, Config{MaxMessageSize: 1 << 20}, func(ln net.Listener) net.Listener {
		return recordingListener{Listener: ln, conns: conns}
	})
	r := dialRaw(t, addr)
	rc := <-conns
	r.handshake(nil)
	r.send(0, &frames.Begin{IncomingWindow: 1000, OutgoingWindow: 1000})
	if _, ok := r.next().(*frames.Begin); !ok {
		t.Fatal("no begin reply")
	}
	r.attachSender(0, "s", "q")
	send := func(id uint32, size int) {
		t.Helper()
		p := make([]byte, size)
		for i := range p {
			p[i] = byte(i*7) + byte(id)
		}
		if n := r.transferSplit(0, id, p, DefaultMaxFrameSize); n != 2 {
			t.Fatalf("sent in %d frames", n)
		}
		if d, ok := r.next().(*frames.Disposition); !ok || d.First != id {
			t.Fatalf("got %v; want the disposition of delivery %d", d, id)
		}
		b.mu.Lock()
		q := b.queue("q")
		got := q.msgs[len(q.msgs)-1].payload
		b.mu.Unlock()
		if !bytes.Equal(got, p) {
			t.Fatalf("delivery %d: stored %d bytes, not the %d sent (or not the same)", id, len(got), len(p))
		}
	}
	send(0, 65536+100) // the stream now carries large frames
	buf0, direct0 := rc.counts()
	const n = 20
	for id := uint32(1); id <= n; id++ {
		send(id, 65536+100)
	}
	buf1, direct1 := rc.counts()
	perMsg := (buf1 - buf0) / n
	t.Logf("per 64 KB message: %d bytes through the read buffer, %d read directly", perMsg, (direct1-direct0)/n)
	// Two header fills of at most largeFill each, and once in a while a
	// fill of the whole buffer if a header arrived alone.
	if perMsg > 3*largeFill {
		t.Fatalf("%d bytes of each 64 KB message went through the read buffer; want at most %d", perMsg, 3*largeFill)
	}
}
