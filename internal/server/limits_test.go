package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

// TestLimitsReachEndpoint: the limits in Options reach the AMQP endpoint
// and the Service Bus handler.
func TestLimitsReachEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A connection that never puts a token is closed at AuthTimeout.
	s := start(t, Options{Server: config.Server{Memory: true, AuthTimeout: 100 * time.Millisecond, MaxSessions: 4}})
	defer stop(t, s)
	nc, err := net.Dial("tcp", s.AMQPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	out := []byte(frames.ProtocolHeaderSASL)
	out, _ = frames.AppendFrame(out, 0, &frames.SASLInit{Mechanism: frames.SASLMechanismAnonymous})
	out = append(out, frames.ProtocolHeaderAMQP...)
	out, _ = frames.AppendFrame(out, 0, &frames.Open{ContainerID: "idle"})
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	var hdr [8]byte
	var closed *frames.Close
	var open *frames.Open
	for i := 0; closed == nil; i++ {
		if i == 0 || i == 3 {
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				t.Fatal(err)
			}
			continue
		}
		fr, err := frames.ReadFrame(br, 0)
		if err != nil {
			t.Fatal(err)
		}
		switch b := fr.Body.(type) {
		case *frames.Open:
			open = b
		case *frames.Close:
			closed = b
		}
	}
	if open == nil || open.ChannelMax != 3 {
		t.Errorf("open %v: want channel-max 3", open)
	}
	if closed.Error == nil || closed.Error.Condition != frames.ErrCondUnauthorizedAccess {
		t.Errorf("close %v, want unauthorized-access", closed.Error)
	}

	// A peek-lock link holds at most MaxUnsettledPerLink deliveries.
	s2 := start(t, Options{Server: config.Server{Memory: true, AllowAnyKey: true, MaxUnsettledPerLink: 2}})
	defer stop(t, s2)
	if _, err := s2.Broker().CreateQueue("q", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	conn, err := goamqp.Dial(ctx, "amqp://"+s2.AMQPAddr().String(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"1", "2", "3"} {
		if err := snd.Send(ctx, goamqp.NewMessage([]byte(b)), nil); err != nil {
			t.Fatal(err)
		}
	}
	second := goamqp.ReceiverSettleModeSecond
	rcv, err := sess.NewReceiver(ctx, "q", &goamqp.ReceiverOptions{SettlementMode: &second, Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := rcv.Receive(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if m, err := rcv.Receive(short, nil); err == nil {
		t.Errorf("third delivery %q beyond MaxUnsettledPerLink 2", m.GetData())
	}
	_ = conn.Close()
}
