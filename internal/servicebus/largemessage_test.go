package servicebus_test

// Messages near the 256 KiB limit with the official Go SDK, over the
// endpoint's 64 KiB frames: every path that carries one is a multi-frame
// transfer in one direction or both.

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// nearLimit is a body that, with its envelope, fits the 256 KiB limit.
func nearLimit(fill byte) []byte { return bytes.Repeat([]byte{fill}, 256<<10-1024) }

func TestLargeMessagesGoSDK(t *testing.T) {
	s := startSessions(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 60*time.Second)
	snd := newSender(t, c, "q")

	// A single send and a batch holding one near-limit message.
	send(t, ctx, snd, &azservicebus.Message{Body: nearLimit('a')})
	batch, err := snd.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := batch.AddMessage(&azservicebus.Message{Body: nearLimit('b')}, nil); err != nil {
		t.Fatalf("AddMessage(near the limit): %v", err)
	}
	if err := snd.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatalf("SendMessageBatch: %v", err)
	}
	// A scheduled one, read back by peek (a management response over
	// 64 KiB) and cancelled.
	seqs, err := snd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: nearLimit('c')}}, time.Now().Add(time.Hour), nil)
	if err != nil || len(seqs) != 1 {
		t.Fatalf("ScheduleMessages = %v, %v", seqs, err)
	}

	r := newReceiver(t, c, "q", nil)
	peeked, err := r.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	if err != nil || len(peeked) != 3 {
		t.Fatalf("PeekMessages = %d messages, %v", len(peeked), err)
	}
	for i, fill := range []byte("abc") {
		if !bytes.Equal(peeked[i].Body, nearLimit(fill)) {
			t.Fatalf("peeked message %d: %d bytes, changed on the way", i, len(peeked[i].Body))
		}
	}
	if err := snd.CancelScheduledMessages(ctx, seqs, nil); err != nil {
		t.Fatalf("CancelScheduledMessages: %v", err)
	}
	for i, m := range receiveN(t, ctx, r, 2) {
		if !bytes.Equal(m.Body, nearLimit("ab"[i])) {
			t.Fatalf("received message %d: %d bytes, changed on the way", i, len(m.Body))
		}
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}

	// One byte over the limit is refused, and the link stays usable.
	err = snd.SendMessage(ctx, &azservicebus.Message{Body: make([]byte, 256<<10+1)}, nil)
	if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
		t.Fatalf("SendMessage(256 KiB + 1) = %v; want ErrMessageTooLarge", err)
	}
	send(t, ctx, snd, &azservicebus.Message{Body: []byte("small")})

	// Session state of 100 KiB, set and read back.
	ssnd := newSender(t, c, "sq")
	send(t, ctx, ssnd, smessage("big", "x"))
	cs := acceptSession(t, ctx, c, "sq", "big")
	state := bytes.Repeat([]byte("state-"), 100<<10/6)
	if err := cs.SetSessionState(ctx, state, nil); err != nil {
		t.Fatalf("SetSessionState(%d bytes): %v", len(state), err)
	}
	if got, err := cs.GetSessionState(ctx, nil); err != nil || !bytes.Equal(got, state) {
		t.Fatalf("GetSessionState = %d bytes, %v; want the %d set", len(got), err, len(state))
	}
}
