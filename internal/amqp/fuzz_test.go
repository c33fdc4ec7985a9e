package amqp

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// fuzzPreamble brings a connection to the point where arbitrary frames
// are interesting: SASL done, open, a session on channel 0 with a client
// sender link (handle 0, target "q") and a client receiver link (handle
// 1, source "q") holding credit.
func fuzzPreamble() []byte {
	b := []byte(frames.ProtocolHeaderSASL)
	add := func(ch uint16, body frames.Body) {
		var err error
		if b, err = frames.AppendFrame(b, ch, body); err != nil {
			panic(err)
		}
	}
	add(0, &frames.SASLInit{Mechanism: frames.SASLMechanismAnonymous})
	b = append(b, frames.ProtocolHeaderAMQP...)
	add(0, &frames.Open{ContainerID: "fuzz", MaxFrameSize: 1024})
	add(0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100})
	add(0, &frames.Attach{Name: "s", Handle: 0, Role: frames.RoleSender,
		Target: &frames.Target{Address: "q"}, InitialDeliveryCount: ptr(uint32(0))})
	add(0, &frames.Attach{Name: "r", Handle: 1, Role: frames.RoleReceiver,
		Source: &frames.Source{Address: "q"}, Target: &frames.Target{}})
	add(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: ptr(uint32(1)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(10))})
	return b
}

// fuzzSeeds are frame sequences that follow the preamble.
func fuzzSeeds() [][]byte {
	frame := func(bodies ...frames.Body) []byte {
		var b []byte
		for _, body := range bodies {
			var err error
			if b, err = frames.AppendFrame(b, 0, body); err != nil {
				panic(err)
			}
		}
		return b
	}
	msg, _ := (&frames.Message{Properties: &frames.Properties{MessageID: "m1"}, RawBody: frames.AppendDataSection(nil, []byte("hi"))}).MarshalBinary()
	id := func(v uint32) *uint32 { return &v }
	return [][]byte{
		nil,
		frame(&frames.Transfer{Handle: 0, DeliveryID: id(0), DeliveryTag: []byte{0}, MessageFormat: id(0), Payload: msg}),
		frame(
			&frames.Transfer{Handle: 0, DeliveryID: id(0), DeliveryTag: []byte{0}, MessageFormat: id(0), More: true, Payload: msg[:5]},
			&frames.Transfer{Handle: 0, Payload: msg[5:]},
			&frames.Disposition{Role: frames.RoleReceiver, First: 0, Last: id(10), Settled: true, State: &frames.Accepted{}},
		),
		frame(
			&frames.Transfer{Handle: 0, DeliveryID: id(0), DeliveryTag: []byte{0}, MessageFormat: id(0), Settled: true, Payload: msg},
			&frames.Flow{NextIncomingID: id(0), IncomingWindow: 100, OutgoingWindow: 100, Handle: id(1), DeliveryCount: id(0), LinkCredit: id(5), Drain: true},
			&frames.Disposition{Role: frames.RoleReceiver, First: 0, Settled: false, State: &frames.Modified{DeliveryFailed: true}},
		),
		frame(&frames.Detach{Handle: 1, Closed: true}, &frames.Detach{Handle: 0, Closed: true, Error: &Error{Condition: "x"}}),
		frame(&frames.End{}, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1}),
		frame(&frames.Close{Error: &Error{Condition: CondInternalError}}),
		frame(&frames.Flow{IncomingWindow: 0, OutgoingWindow: 0, Echo: true}),
		{0, 0, 0, 8, 2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff},
		{0, 0, 0, 12, 2, 0, 0, 0, 0x00, 0x53, 0x14, 0x45},
	}
}

// FuzzConn feeds arbitrary bytes to a connection after a valid
// handshake. The server must neither panic nor leak: Shutdown has to
// find every goroutine of the connection finished.
func FuzzConn(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	preamble := fuzzPreamble()
	// The input is followed by a close frame and then zeros: a valid
	// input ends with a clean close, a truncated frame is completed by
	// the zeros, and zeros alone are an invalid frame header, so the
	// server always ends the connection by itself.
	trailer, _ := frames.AppendFrame(nil, 0, &frames.Close{})
	trailer = append(trailer, make([]byte, 4096+8)...)
	f.Fuzz(func(t *testing.T, data []byte) {
		srv, err := NewServer(newTestBroker(), Config{
			Logger:           quietLogger(),
			MaxFrameSize:     4096,
			MaxMessageSize:   2048,
			HandshakeTimeout: 5 * time.Second,
			WriteTimeout:     5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		client, server := net.Pipe()
		srv.accept(server)
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			fuzzClientRead(client)
		}()
		_ = client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		for _, b := range [][]byte{preamble, data, trailer} {
			if _, err := client.Write(b); err != nil {
				break
			}
		}
		select {
		case <-drained: // the connection ended
		case <-time.After(10 * time.Second):
			t.Error("the server did not end the connection")
		}
		_ = client.Close()
		<-drained
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatalf("connection goroutines did not finish: %v", err)
		}
	})
}

// fuzzClientRead reads what the server sends and, like a real client,
// closes the connection once the server's close frame arrives.
func fuzzClientRead(nc net.Conn) {
	br := bufio.NewReader(nc)
	defer func() { _, _ = io.Copy(io.Discard, br) }()
	var hdr [8]byte
	for i := 0; i < 4; i++ { // SASL header, mechanisms, outcome, AMQP header
		if i == 0 || i == 3 {
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				return
			}
			continue
		}
		if _, err := frames.ReadFrame(br, 0); err != nil {
			return
		}
	}
	for {
		fr, err := frames.ReadFrame(br, 0)
		if err != nil {
			return
		}
		if _, ok := fr.Body.(*frames.Close); ok {
			_ = nc.Close()
			return
		}
	}
}
