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
	closed  atomic.Int32
}

func (s *testStream) ReadAt(p []byte, off int64) (int, error) {
	if s.failAt > 0 && off+int64(len(p)) > s.failAt {
		return 0, errors.New("disk on fire")
	}
	if int64(len(p)) > s.maxRead.Load() {
		s.maxRead.Store(int64(len(p)))
	}
	return copy(p, s.data[off:]), nil
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
