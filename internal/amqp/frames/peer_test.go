package frames

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"go.uber.org/goleak"
)

// TestGoAMQPClient runs go-amqp's client against a minimal scripted peer
// built on this package, proving that go-amqp accepts our encoding of
// every performative it meets and that we decode everything it sends:
// SASL ANONYMOUS, open, begin, attach with echoed settle modes, flow,
// transfer, disposition, a refused attach (null source plus closing
// detach with an error), detach, end and close.
func TestGoAMQPClient(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// TCP on loopback rather than net.Pipe: go-amqp closes its net.Conn
	// right after sending close and only ignores net.ErrClosed from its
	// reader, which net.Pipe does not return.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peerDone := make(chan error, 1)
	go func() {
		server, err := ln.Accept()
		ln.Close()
		if err != nil {
			peerDone <- err
			return
		}
		peerDone <- runPeer(server)
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}

	conn, err := amqp.NewConn(ctx, client, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous(), HostName: "localhost:5672"})
	if err != nil {
		t.Fatalf("NewConn: %v", err)
	}
	session, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	sender, err := session.NewSender(ctx, "queue", &amqp.SenderOptions{
		SettlementMode:              amqp.SenderSettleModeMixed.Ptr(),
		RequestedReceiverSettleMode: amqp.ReceiverSettleModeFirst.Ptr(),
	})
	if err != nil {
		t.Fatalf("NewSender: %v", err)
	}
	if got := sender.MaxMessageSize(); got != 262144 {
		t.Errorf("sender max message size %d", got)
	}
	subject := "hello"
	msg := &amqp.Message{
		Properties:            &amqp.MessageProperties{MessageID: "m1", Subject: &subject},
		ApplicationProperties: map[string]any{"k": "v"},
		Data:                  [][]byte{[]byte("payload")},
	}
	if err := sender.Send(ctx, msg, nil); err != nil {
		t.Fatalf("Send: %v", err)
	}

	receiver, err := session.NewReceiver(ctx, "queue", &amqp.ReceiverOptions{
		SettlementMode: amqp.ReceiverSettleModeSecond.Ptr(),
		Credit:         10,
		Filters:        []amqp.LinkFilter{amqp.NewLinkFilter("com.microsoft:session-filter", 0x137000000c, "session-1")},
	})
	if err != nil {
		t.Fatalf("NewReceiver: %v", err)
	}
	got, err := receiver.Receive(ctx, nil)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if string(got.GetData()) != "payload" || got.Properties.MessageID != "m1" || *got.Properties.Subject != "hello" ||
		got.ApplicationProperties["k"] != "v" || got.Annotations["x-opt-sequence-number"] != int64(1) ||
		got.Header == nil || got.Header.DeliveryCount != 0 {
		t.Errorf("received %+v annotations %v header %+v", got.Properties, got.Annotations, got.Header)
	}
	if err := receiver.AcceptMessage(ctx, got); err != nil {
		t.Fatalf("AcceptMessage: %v", err)
	}

	// A refused attach surfaces the peer's error.
	_, err = session.NewReceiver(ctx, "missing", nil)
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Condition != amqp.ErrCondNotFound {
		t.Errorf("attach to missing entity: %v", err)
	}

	if err := receiver.Close(ctx); err != nil {
		t.Errorf("receiver Close: %v", err)
	}
	if err := sender.Close(ctx); err != nil {
		t.Errorf("sender Close: %v", err)
	}
	if err := session.Close(ctx); err != nil {
		t.Errorf("session Close: %v", err)
	}
	if err := conn.Close(); err != nil {
		t.Errorf("conn Close: %v", err)
	}
	if err := <-peerDone; err != nil {
		t.Fatalf("peer: %v", err)
	}
}

// runPeer is the scripted broker side. It returns when the client closes
// the connection.
func runPeer(c net.Conn) error {
	defer c.Close()
	r := bufio.NewReader(c)
	var out []byte
	send := func(ch uint16, b Body) error {
		var err error
		if out, err = AppendFrame(out[:0], ch, b); err != nil {
			return err
		}
		_, err = c.Write(out)
		return err
	}
	readFrame := func() (Frame, error) {
		for {
			f, err := ReadFrame(r, 1<<20)
			if err != nil || f.Body != nil {
				return f, err
			}
		}
	}
	header := func(want string) error {
		var h [8]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return err
		}
		if string(h[:]) != want {
			return fmt.Errorf("protocol header %q", h)
		}
		_, err := c.Write([]byte(want))
		return err
	}

	// SASL.
	if err := header(ProtocolHeaderSASL); err != nil {
		return err
	}
	if err := send(0, &SASLMechanisms{Mechanisms: []Symbol{SASLMechanismMSSBCBS, SASLMechanismAnonymous}}); err != nil {
		return err
	}
	f, err := readFrame()
	if err != nil {
		return err
	}
	if in, ok := f.Body.(*SASLInit); !ok || in.Mechanism != SASLMechanismAnonymous || f.Type != FrameTypeSASL {
		return fmt.Errorf("want sasl-init ANONYMOUS, got %v", f.Body)
	}
	if err := send(0, &SASLOutcome{Code: SASLCodeOK}); err != nil {
		return err
	}

	// AMQP.
	if err := header(ProtocolHeaderAMQP); err != nil {
		return err
	}
	f, err = readFrame()
	if err != nil {
		return err
	}
	if o, ok := f.Body.(*Open); !ok || o.Hostname != "localhost:5672" {
		return fmt.Errorf("want open, got %v", f.Body)
	}
	if err := send(0, &Open{ContainerID: "busbar", MaxFrameSize: 65536, ChannelMax: 65535}); err != nil {
		return err
	}

	var stored []byte // the message the client sent, as received
	var nextOut uint32
	receiverHandle := ^uint32(0)
	detached := map[uint32]bool{} // links this side detached first
	sentToReceiver := false
	frames := 0
	for {
		f, err := readFrame()
		if err != nil {
			return fmt.Errorf("reading after %d frames: %w", frames, err)
		}
		frames++
		ch := f.Channel
		switch b := f.Body.(type) {
		case *Begin:
			err = send(ch, &Begin{RemoteChannel: Ptr(ch), NextOutgoingID: 0, IncomingWindow: 5000, OutgoingWindow: 5000})
		case *Attach:
			reply := &Attach{Name: b.Name, Handle: b.Handle, Role: !b.Role, SndSettleMode: b.SndSettleMode,
				RcvSettleMode: b.RcvSettleMode, Source: b.Source, Target: b.Target}
			if reply.SndSettleMode == nil {
				reply.SndSettleMode = Ptr(SenderSettleModeMixed)
			}
			if reply.RcvSettleMode == nil {
				reply.RcvSettleMode = Ptr(ReceiverSettleModeFirst)
			}
			switch {
			case b.Role == RoleSender:
				reply.MaxMessageSize = 262144
				if err = send(ch, reply); err == nil {
					err = send(ch, &Flow{NextIncomingID: Ptr[uint32](0), IncomingWindow: 5000, NextOutgoingID: nextOut,
						OutgoingWindow: 5000, Handle: Ptr(b.Handle), DeliveryCount: Ptr[uint32](0), LinkCredit: Ptr[uint32](100)})
				}
			case b.Source != nil && b.Source.Address == "missing":
				reply.Source = nil
				reply.InitialDeliveryCount = Ptr[uint32](0)
				detached[b.Handle] = true
				if err = send(ch, reply); err == nil {
					err = send(ch, &Detach{Handle: b.Handle, Closed: true,
						Error: &Error{Condition: ErrCondNotFound, Description: "The messaging entity 'missing' could not be found."}})
				}
			default:
				if b.Source == nil || b.Source.Filter["com.microsoft:session-filter"] != sessionFilter {
					return fmt.Errorf("receiver attach without the session filter: %v", b.Source)
				}
				receiverHandle = b.Handle
				reply.InitialDeliveryCount = Ptr[uint32](0)
				err = send(ch, reply)
			}
		case *Flow:
			if b.Handle != nil && *b.Handle == receiverHandle && b.LinkCredit != nil && *b.LinkCredit > 0 && !sentToReceiver {
				sentToReceiver = true
				s, serr := SplitMessage(stored)
				if serr != nil {
					return serr
				}
				var payload []byte
				payload, err = s.AppendWith(nil, &Header{Priority: 4}, nil, map[Symbol]any{"x-opt-sequence-number": int64(1)})
				if err == nil {
					tag := UUID{1, 2, 3}
					err = send(ch, &Transfer{Handle: receiverHandle, DeliveryID: Ptr(nextOut), DeliveryTag: tag[:],
						MessageFormat: Ptr(MessageFormatAMQP), Payload: payload})
					nextOut++
				}
			}
		case *Transfer:
			stored = append([]byte(nil), b.Payload...)
			var m Message
			if err = m.UnmarshalBinary(stored); err != nil {
				return err
			}
			if !b.Settled {
				err = send(ch, &Disposition{Role: RoleReceiver, First: *b.DeliveryID, Settled: true, State: &Accepted{}})
			}
		case *Disposition:
			if _, ok := b.State.(*Accepted); !ok || b.Role != RoleReceiver {
				return fmt.Errorf("unexpected disposition %v", b)
			}
			err = send(ch, &Disposition{Role: RoleSender, First: b.First, Last: b.Last, Settled: true, State: &Accepted{}})
		case *Detach:
			if !detached[b.Handle] {
				err = send(ch, &Detach{Handle: b.Handle, Closed: true})
			}
			delete(detached, b.Handle)
		case *End:
			err = send(ch, &End{})
		case *Close:
			// The client may already have closed its end: go-amqp does
			// not wait for the reply.
			_ = send(0, &Close{})
			return nil
		default:
			return fmt.Errorf("unexpected %v", f.Body)
		}
		if err != nil {
			return fmt.Errorf("answering %v: %w", f.Body, err)
		}
	}
}
