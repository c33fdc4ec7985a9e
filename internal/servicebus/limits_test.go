package servicebus_test

// Connection limits against clients that never authenticate, with the
// official Go SDK as the client that must still be served.

import (
	"net"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// holdSlots opens n connections that finish the handshake, begin a
// session and then send only heartbeats, never a $cbs token, and n that
// send only the SASL protocol header.
func holdSlots(t *testing.T, addr string, n int) {
	t.Helper()
	for range n {
		rc := dialRaw(t, addr)
		if _, err := rc.nc.Write(frames.AppendEmptyFrame(nil)); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		if _, err := nc.Write([]byte(frames.ProtocolHeaderSASL)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUnauthenticatedCannotLockOut: connections that never present a token
// cannot hold the slots of --max-connections; the Go SDK connects, sends
// and receives while they keep coming.
func TestUnauthenticatedCannotLockOut(t *testing.T) {
	srv := servicebustest.Start(t, &servicebustest.Options{
		Queues: []string{"q"},
		AMQP:   amqp.Config{MaxConnections: 16, MaxUnauthenticatedConnections: 4},
	})
	holdSlots(t, srv.Addr, 16) // 32 connections for 16 slots

	ctx := testCtx(t, 30*time.Second)
	c := newClient(t, srv.ConnectionString)
	s := newSender(t, c, "q")
	send(t, ctx, s, &azservicebus.Message{Body: []byte("one")})
	holdSlots(t, srv.Addr, 16) // more arrive; the client keeps its connection
	send(t, ctx, s, &azservicebus.Message{Body: []byte("two")})
	r := newReceiver(t, c, "q", nil)
	for _, m := range receiveN(t, ctx, r, 2) {
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if st := srv.AMQP.Stats(); st.Unauthenticated > 4 {
		t.Errorf("%+v: more than 4 unauthenticated connections", st)
	}
}

// TestTokenDeadline closes a connection that opens a session but never
// puts a token.
func TestTokenDeadline(t *testing.T) {
	srv := servicebustest.Start(t, &servicebustest.Options{
		Queues: []string{"q"},
		AMQP:   amqp.Config{AuthTimeout: 200 * time.Millisecond},
	})
	rc := dialRaw(t, srv.Addr)
	for {
		if cl, ok := rc.read().Body.(*frames.Close); ok {
			if cl.Error == nil || cl.Error.Condition != frames.ErrCondUnauthorizedAccess {
				t.Fatalf("close %v, want unauthorized-access", cl.Error)
			}
			t.Logf("closed: %v", cl.Error)
			break
		}
	}
	// The Go SDK puts its token at once and is not affected.
	ctx := testCtx(t, 30*time.Second)
	s := newSender(t, newClient(t, srv.ConnectionString), "q")
	send(t, ctx, s, &azservicebus.Message{Body: []byte("before")})
	time.Sleep(400 * time.Millisecond) // past the deadline
	send(t, ctx, s, &azservicebus.Message{Body: []byte("after")})
}
