package amqp

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// testStream is a PayloadStream over bytes that records its largest read
// and whether it was closed, and fails reads from failAt on if set.
type testStream struct {
	data    []byte
	failAt  int64
	maxRead atomic.Int64
	read    atomic.Int64 // bytes read in all
	closed  atomic.Int32
}

func (s *testStream) ReadAt(p []byte, off int64) (int, error) {
	if s.failAt > 0 && off+int64(len(p)) > s.failAt {
		return 0, errors.New("disk on fire")
	}
	if int64(len(p)) > s.maxRead.Load() {
		s.maxRead.Store(int64(len(p)))
	}
	n := copy(p, s.data[off:])
	s.read.Add(int64(n))
	return n, nil
}

func (s *testStream) Close() error { s.closed.Add(1); return nil }

// streamed splits payload into Payload, a Stream and a Trailer.
func streamed(payload []byte, failAt int64, streams *[]*testStream, mu *sync.Mutex) *OutgoingDelivery {
	head, tail := 100, 10
	st := &testStream{data: payload[head : len(payload)-tail], failAt: failAt}
	mu.Lock()
	*streams = append(*streams, st)
	mu.Unlock()
	return &OutgoingDelivery{Payload: payload[:head], Parts: []Part{{Stream: st, Len: int64(len(st.data))}, {Bytes: payload[len(payload)-tail:]}}}
}

// TestOutgoingStream sends a 3 MB message whose middle is a Stream: the
// client (go-amqp) receives it byte for byte, the stream is read a frame
// at a time and closed once sent.
func TestOutgoingStream(t *testing.T) {
	b := newTestBroker()
	var mu sync.Mutex
	var streams []*testStream
	b.stream = func(p []byte) *OutgoingDelivery { return streamed(p, 0, &streams, &mu) }
	_, addr := startServer(t, b, Config{})
	body := make([]byte, 3<<20)
	for i := range body {
		body[i] = byte(i * 13)
	}
	b.put("q", body)
	c := dial(t, addr, nil)
	s := openSession(t, c)
	r, err := s.NewReceiver(testCtx(t), "q", &goamqp.ReceiverOptions{Credit: 1, MaxMessageSize: 10 << 20})
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Receive(testCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.GetData(), body) {
		t.Fatalf("received %d bytes, not the body sent", len(m.GetData()))
	}
	r.AcceptMessage(testCtx(t), m)
	mu.Lock()
	st := streams[0]
	mu.Unlock()
	if got := st.maxRead.Load(); got > DefaultMaxFrameSize {
		t.Fatalf("largest stream read %d bytes: more than a frame", got)
	}
	if st.closed.Load() != 1 {
		t.Fatalf("stream closed %d times", st.closed.Load())
	}
}

// TestOutgoingStreamAbort: a stream that fails mid-message aborts the
// delivery; the client never gets it, the stream is closed, and the link
// goes on with the next message.
func TestOutgoingStreamAbort(t *testing.T) {
	b := newTestBroker()
	var mu sync.Mutex
	var streams []*testStream
	var n atomic.Int32
	b.stream = func(p []byte) *OutgoingDelivery {
		if n.Add(1) == 1 {
			return streamed(p, 500<<10, &streams, &mu)
		}
		return streamed(p, 0, &streams, &mu)
	}
	_, addr := startServer(t, b, Config{})
	bad := bytes.Repeat([]byte("bad "), 1<<18)
	good := bytes.Repeat([]byte("good"), 1<<18)
	b.put("q", bad)
	b.put("q", good)
	c := dial(t, addr, nil)
	s := openSession(t, c)
	r, err := s.NewReceiver(testCtx(t), "q", &goamqp.ReceiverOptions{Credit: 2, MaxMessageSize: 10 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()
	m, err := r.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.GetData(), good) {
		t.Fatalf("received %d bytes, not the good message", len(m.GetData()))
	}
	r.AcceptMessage(testCtx(t), m)
	mu.Lock()
	defer mu.Unlock()
	for i, st := range streams {
		if st.closed.Load() != 1 {
			t.Fatalf("stream %d closed %d times", i, st.closed.Load())
		}
	}
}

// memSpool is a Spool in memory that fails its writes past failAt bytes.
type memSpool struct {
	mu      sync.Mutex
	b       []byte
	failAt  int
	aborted bool
}

func (s *memSpool) Write(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAt > 0 && len(s.b)+len(p) > s.failAt {
		return Errorf(CondResourceLimitExceeded, "spool full")
	}
	s.b = append(s.b, p...)
	return nil
}

func (s *memSpool) Abort() { s.mu.Lock(); s.aborted = true; s.mu.Unlock() }

// TestIncomingSpool: a delivery past SpoolFrom goes to the link's spool
// frame by frame (OnDelivery gets it with Spooled, no Payload); a small
// one stays in memory; a refusal and a failing spool reject the delivery
// with their condition; a link gone mid-transfer aborts its spool.
func TestIncomingSpool(t *testing.T) {
	b := newTestBroker()
	var mu sync.Mutex
	var spools []*memSpool
	failAt := 0
	refuse := false
	b.incoming = func(l *IncomingLink) {
		l.SpoolFrom = 256 << 10
		l.Spool = func(d *IncomingDelivery) (Spool, error) {
			mu.Lock()
			defer mu.Unlock()
			if refuse {
				return nil, Errorf(CondResourceLimitExceeded, "too many large messages")
			}
			sp := &memSpool{failAt: failAt}
			spools = append(spools, sp)
			return sp, nil
		}
	}
	got := make(chan *IncomingDelivery, 10)
	b.intercept = func(d *IncomingDelivery) bool {
		got <- d
		d.Settle(&frames.Accepted{})
		return true
	}
	_, addr := startServer(t, b, Config{MaxMessageSize: 8 << 20})
	c := dial(t, addr, nil)
	s := openSession(t, c)
	snd, err := s.NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 3<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	if err := snd.Send(testCtx(t), goamqp.NewMessage(body), nil); err != nil {
		t.Fatal(err)
	}
	d := <-got
	if d.Payload != nil || d.Spooled == nil {
		t.Fatalf("payload %d bytes, spooled %v", len(d.Payload), d.Spooled != nil)
	}
	want, _ := goamqp.NewMessage(body).MarshalBinary()
	if sp := d.Spooled.(*memSpool); !bytes.Equal(sp.b, want) {
		t.Fatalf("spooled %d bytes, not the %d sent", len(sp.b), len(want))
	}
	if err := snd.Send(testCtx(t), goamqp.NewMessage([]byte("small")), nil); err != nil {
		t.Fatal(err)
	}
	if d := <-got; d.Spooled != nil || len(d.Payload) == 0 {
		t.Fatal("a small message was spooled")
	}

	mu.Lock()
	refuse = true
	mu.Unlock()
	var amqpErr *goamqp.Error
	if err := snd.Send(testCtx(t), goamqp.NewMessage(body), nil); !errors.As(err, &amqpErr) || amqpErr.Condition != goamqp.ErrCond(CondResourceLimitExceeded) {
		t.Fatalf("send refused by Spool: %v", err)
	}
	mu.Lock()
	refuse, failAt = false, 1<<20
	mu.Unlock()
	if err := snd.Send(testCtx(t), goamqp.NewMessage(body), nil); !errors.As(err, &amqpErr) || amqpErr.Condition != goamqp.ErrCond(CondResourceLimitExceeded) {
		t.Fatalf("send with a failing spool: %v", err)
	}
	mu.Lock()
	if last := spools[len(spools)-1]; !last.aborted {
		t.Fatal("the failed spool was not aborted")
	}
	mu.Unlock()
}

// TestOutgoingStreamSlowReader: a client that stops reading its socket
// mid-message stops the stream's reads too (the writer's buffer and the
// socket's fill), so the endpoint holds a bounded part of a 64 MB
// message, not the message; when it reads again the message completes.
func TestOutgoingStreamSlowReader(t *testing.T) {
	b := newTestBroker()
	var mu sync.Mutex
	var streams []*testStream
	b.stream = func(p []byte) *OutgoingDelivery { return streamed(p, 0, &streams, &mu) }
	_, addr := startServer(t, b, Config{})
	body := make([]byte, 64<<20)
	b.put("q", body)
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.send(0, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 1 << 20, OutgoingWindow: 100})
	if _, ok := r.next().(*frames.Begin); !ok {
		t.Fatal("no begin reply")
	}
	r.attachReceiver(1, "r", "q")
	r.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 1 << 20, OutgoingWindow: 100,
		Handle: ptr(uint32(1)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(1))})
	// Read nothing for a while.
	var st *testStream
	deadline := time.Now().Add(testTimeout)
	for st == nil || st.read.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stream was never read")
		}
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		if len(streams) > 0 {
			st = streams[0]
		}
		mu.Unlock()
	}
	time.Sleep(300 * time.Millisecond)
	stalled := st.read.Load()
	time.Sleep(200 * time.Millisecond)
	if again := st.read.Load(); again != stalled {
		t.Fatalf("the stream was read on (%d, then %d bytes) while the client read nothing", stalled, again)
	}
	if stalled > 24<<20 {
		t.Fatalf("%d MiB of the message read while the client read nothing", stalled>>20)
	}
	t.Logf("stalled after %d MiB of %d", stalled>>20, len(body)>>20)
	// Now read it all.
	got := 0
	for {
		tr, ok := r.next().(*frames.Transfer)
		if !ok {
			continue
		}
		got += len(tr.Payload)
		if !tr.More {
			break
		}
	}
	if want := 100 + len(st.data) + 10; got != want {
		t.Fatalf("received %d bytes, want %d", got, want)
	}
}
