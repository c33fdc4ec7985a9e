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
	return &OutgoingDelivery{Payload: payload[:head], Stream: st, StreamLen: int64(len(st.data)), Trailer: payload[len(payload)-tail:]}
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
