package servicebus_test

import (
	"errors"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// TestWireNoSASL: a client that skips SASL (go-amqp without a SASL type
// sends the plain AMQP header, as rhea does for a SAS-token connection
// string) is connected, and authorised through $cbs alone: links are
// refused until a valid token is put, a wrong token does not help, and a
// valid one opens the queue for sending and receiving.
func TestWireNoSASL(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	ctx := testCtx(t, 30*time.Second)
	conn, err := amqp.Dial(ctx, "amqp://"+s.Addr, nil)
	if err != nil {
		t.Fatalf("dial without SASL: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	w := &wire{t: t, s: s, conn: conn, ctx: ctx}
	sess := w.session()

	var ae *amqp.Error
	if _, err := sess.NewSender(ctx, "q", nil); !errors.As(err, &ae) || ae.Condition != amqp.ErrCondUnauthorizedAccess {
		t.Fatalf("sender without a token = %v; want unauthorized-access", err)
	}
	aud := "sb://" + s.Addr + "/q"
	cbs := w.newRPC("$cbs", "$cbs-reply-"+uuid.NewString(), false)
	if code := status(t, putToken(t, cbs, aud, auth.NewToken(auth.DefaultKeyName, "not-the-key", aud, time.Now().Add(time.Hour)))); code != 401 {
		t.Fatalf("put-token with a wrong key: %d; want 401", code)
	}
	if _, err := sess.NewReceiver(ctx, "q", nil); !errors.As(err, &ae) || ae.Condition != amqp.ErrCondUnauthorizedAccess {
		t.Fatalf("receiver after a refused token = %v; want unauthorized-access", err)
	}

	if code := status(t, putToken(t, cbs, aud, jsToken(auth.DefaultKeyName, auth.DefaultKey, aud))); code != 202 {
		t.Fatalf("put-token: %d", code)
	}
	snd, err := sess.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatalf("sender after put-token: %v", err)
	}
	if err := snd.Send(ctx, &amqp.Message{Data: [][]byte{[]byte("without SASL")}}, nil); err != nil {
		t.Fatalf("send: %v", err)
	}
	rcv, err := sess.NewReceiver(ctx, "q", &amqp.ReceiverOptions{Credit: 1})
	if err != nil {
		t.Fatalf("receiver after put-token: %v", err)
	}
	m, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	if string(m.GetData()) != "without SASL" {
		t.Fatalf("received %q", m.GetData())
	}
	if err := rcv.AcceptMessage(ctx, m); err != nil {
		t.Fatalf("complete: %v", err)
	}
}
