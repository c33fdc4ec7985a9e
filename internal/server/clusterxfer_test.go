package server

// Auto-forwarding between queues and topics that different nodes of a
// cluster serve (the outbox, docs/design/cluster.md §9.3), driven by the
// official Go SDK through node a only.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/cluster"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

// TestClusterForwarding: queue src forwards (ForwardTo) to queue dst, a
// queue to a topic with two subscriptions, a queue's dead-letter queue
// (ForwardDeadLetteredMessagesTo) to a queue; each pair on two different
// nodes. Every message arrives once, in the source's order. A target over
// its quota when the message lands sends it back to the source's transfer
// dead-letter queue (QuotaExceeded, a bounce); a disabled one, or a
// deleted one, is refused at the source (MessagingEntityDisabled,
// MessagingEntityNotFound). Then dst's owner stops without handing
// anything off while messages keep being forwarded to it: once a survivor
// has taken dst, every message is in dst exactly once, in order.
func TestClusterForwarding(t *testing.T) {
	_, url := pgtest.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()

	ids := []string{"a", "b", "c"}
	nodes := map[string]*Server{}
	adms := map[string]*admin.Client{}
	for _, id := range ids {
		s := start(t, clusterOptions(t, url, id))
		nodes[id] = s
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer scancel()
			_ = s.Shutdown(sctx)
		})
		_, adm := sasAdmin(t, s)
		adms[id] = adm
	}
	a := nodes["a"]
	cs := "Endpoint=sb://" + a.AMQPAddr().String() + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{
		MaxRetries: 30, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })

	// Entities are created through a; each goes to its placement's winner.
	winner := map[string]string{}
	unitOf := func(name string) uint64 {
		// Created on its placement winner, or on a (which hands it off)
		// when a did not see that node live yet.
		u, on := unitServing(nodes, name)
		if on == "" {
			t.Fatalf("%s not served by any node right after its creation", name)
		}
		return u
	}
	createQueue := func(name string, p *admin.QueueProperties) {
		t.Helper()
		if _, err := adms["a"].CreateQueue(ctx, name, &admin.CreateQueueOptions{Properties: p}); err != nil {
			t.Fatalf("create queue %s: %v", name, err)
		}
		winner[name] = cluster.Winner(unitOf(name), ids)
	}
	// target creates a target whose winner is not excluded; source then
	// creates sources forwarding to it until one's winner differs.
	target := func(base string, excluded []string, create func(name string)) string {
		t.Helper()
		for i := 0; i < 12; i++ {
			name := fmt.Sprint(base, i)
			create(name)
			if !slices.Contains(excluded, winner[name]) {
				return name
			}
		}
		t.Fatalf("no %s placed outside %v", base, excluded)
		return ""
	}
	source := func(base, dst string, p func() *admin.QueueProperties) string {
		t.Helper()
		return target(base, []string{winner[dst]}, func(name string) { createQueue(name, p()) })
	}
	dst := target("dst", []string{"a"}, func(n string) { createQueue(n, nil) }) // killed at the end: not the clients' node
	src := source("src", dst, func() *admin.QueueProperties { return &admin.QueueProperties{ForwardTo: to.Ptr(dst)} })
	topic := target("fan", nil, func(n string) {
		if _, err := adms["a"].CreateTopic(ctx, n, nil); err != nil {
			t.Fatalf("create topic %s: %v", n, err)
		}
		for _, s := range []string{"s1", "s2"} {
			if _, err := adms["a"].CreateSubscription(ctx, n, s, nil); err != nil {
				t.Fatalf("create subscription %s/%s: %v", n, s, err)
			}
		}
		winner[n] = cluster.Winner(unitOf(n), ids)
	})
	tsrc := source("tsrc", topic, func() *admin.QueueProperties { return &admin.QueueProperties{ForwardTo: to.Ptr(topic)} })
	dlq := target("dlq", nil, func(n string) { createQueue(n, nil) })
	dlsrc := source("dlsrc", dlq, func() *admin.QueueProperties {
		return &admin.QueueProperties{ForwardDeadLetteredMessagesTo: to.Ptr(dlq)}
	})
	off := target("off", nil, func(n string) { createQueue(n, &admin.QueueProperties{MaxSizeInMegabytes: to.Ptr(int32(1))}) })
	offsrc := source("offsrc", off, func() *admin.QueueProperties { return &admin.QueueProperties{ForwardTo: to.Ptr(off)} })
	for _, n := range []string{dst, src, topic, tsrc, dlq, dlsrc, off, offsrc} {
		waitFor(t, ctx, func() bool {
			for _, id := range ids {
				if _, ok := nodes[id].Broker().EntityStoreID(n); ok != (id == winner[n]) {
					return false
				}
			}
			return true
		}, n+" to move to "+winner[n])
	}
	t.Logf("placed: %v", winner)

	send := func(queue string, from, to int) {
		t.Helper()
		snd, err := client.NewSender(queue, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer snd.Close(context.Background())
		for i := from; i < to; i++ {
			if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprintf("m%03d", i))}, nil); err != nil {
				t.Fatalf("send m%03d to %s: %v", i, queue, err)
			}
		}
	}
	// receive completes n messages of entity (a queue, or topic and
	// subscription) and returns them in the order received.
	receive := func(n int, queue string, opts *azservicebus.ReceiverOptions, sub ...string) []*azservicebus.ReceivedMessage {
		t.Helper()
		var rcv *azservicebus.Receiver
		var err error
		if len(sub) > 0 {
			rcv, err = client.NewReceiverForSubscription(queue, sub[0], opts)
		} else {
			rcv, err = client.NewReceiverForQueue(queue, opts)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer rcv.Close(context.Background())
		var got []*azservicebus.ReceivedMessage
		for len(got) < n {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			ms, err := rcv.ReceiveMessages(rctx, n-len(got), nil)
			rcancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Logf("receive from %s: %v (the SDK retries)", queue, err)
			}
			for _, m := range ms {
				if err := rcv.CompleteMessage(ctx, m, nil); err != nil {
					t.Fatalf("complete %s: %v", m.Body, err)
				}
				got = append(got, m)
			}
			if ctx.Err() != nil {
				t.Fatalf("received %d of %d from %s %v: %v", len(got), n, queue, sub, ctx.Err())
			}
		}
		pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer pcancel()
		if extra, _ := rcv.ReceiveMessages(pctx, 10, nil); len(extra) != 0 {
			t.Fatalf("%d more messages than the %d expected in %s %v: first %s", len(extra), n, queue, sub, extra[0].Body)
		}
		return got
	}
	inOrder := func(what string, ms []*azservicebus.ReceivedMessage, from, to int) {
		t.Helper()
		if len(ms) != to-from {
			t.Fatalf("%s: %d messages, want %d", what, len(ms), to-from)
		}
		for i, m := range ms {
			if want := fmt.Sprintf("m%03d", from+i); string(m.Body) != want {
				t.Fatalf("%s: message %d is %s, want %s (lost, duplicated or out of order)", what, i, m.Body, want)
			}
		}
	}

	// Queue to queue, and a queue to a topic with two subscriptions.
	send(src, 0, 30)
	got := receive(30, dst, nil)
	inOrder(src+" → "+dst, got, 0, 30)
	if n, ok := got[0].RawAMQPMessage.MessageAnnotations[broker.EnqueueSequenceNumberAnnotation]; !ok || n == nil {
		t.Fatalf("a forwarded message without %s: %v", broker.EnqueueSequenceNumberAnnotation, got[0].RawAMQPMessage.MessageAnnotations)
	}
	send(tsrc, 0, 5)
	for _, s := range []string{"s1", "s2"} {
		inOrder(tsrc+" → "+topic+"/"+s, receive(5, topic, nil, s), 0, 5)
	}

	// Dead-letter forwarding: dead-lettered in dlsrc, received from dlq.
	send(dlsrc, 0, 3)
	rcv, err := client.NewReceiverForQueue(dlsrc, nil)
	if err != nil {
		t.Fatal(err)
	}
	for dead := 0; dead < 3; {
		ms, err := rcv.ReceiveMessages(ctx, 3-dead, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if err := rcv.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: to.Ptr("bad")}); err != nil {
				t.Fatal(err)
			}
			dead++
		}
	}
	rcv.Close(ctx)
	got = receive(3, dlq, nil)
	inOrder(dlsrc+" dead letters → "+dlq, got, 0, 3)
	if got[0].DeadLetterSource == nil || *got[0].DeadLetterSource != dlsrc {
		t.Fatalf("dead-letter source %v, want %s", got[0].DeadLetterSource, dlsrc)
	}

	// A target over its quota when the message lands bounces it back to
	// the source's transfer dead-letter queue.
	snd, err := client.NewSender(off, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: make([]byte, 200<<10)}, nil); err != nil {
			t.Fatalf("fill %s: %v", off, err)
		}
	}
	snd.Close(ctx)
	snd, err = client.NewSender(offsrc, nil)
	if err != nil {
		t.Fatal(err)
	}
	big := "big" + strings.Repeat("x", 100<<10)
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(big)}, nil); err != nil {
		t.Fatal(err)
	}
	snd.Close(ctx)
	got = receive(1, offsrc, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueTransfer})
	if r := got[0].DeadLetterReason; string(got[0].Body) != big || r == nil || *r != broker.ReasonForwardQuotaExceeded {
		t.Fatalf("bounced message of %d bytes: reason %v", len(got[0].Body), r)
	}
	// A disabled target: refused by the source from the target's spec.
	owner := adms[winner[off]]
	qp, err := owner.GetQueue(ctx, off, nil)
	if err != nil || qp == nil {
		t.Fatalf("get %s from its owner: %v", off, err)
	}
	qp.Status = to.Ptr(admin.EntityStatusDisabled)
	if _, err := owner.UpdateQueue(ctx, off, qp.QueueProperties, nil); err != nil {
		t.Fatalf("disable %s: %v", off, err)
	}
	send(offsrc, 0, 2)
	got = receive(2, offsrc, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueTransfer})
	inOrder(offsrc+" bounced", got, 0, 2)
	for _, m := range got {
		if m.DeadLetterReason == nil || *m.DeadLetterReason != broker.ReasonForwardEntityDisabled ||
			m.DeadLetterErrorDescription == nil || !strings.Contains(*m.DeadLetterErrorDescription, off) {
			t.Fatalf("bounced message: reason %v, description %v", m.DeadLetterReason, m.DeadLetterErrorDescription)
		}
	}
	// A deleted target: refused at the source, from the catalog.
	if _, err := adms[winner[dlq]].DeleteQueue(ctx, dlq, nil); err != nil {
		t.Fatalf("delete %s: %v", dlq, err)
	}
	send(dlsrc, 3, 4)
	rcv, err = client.NewReceiverForQueue(dlsrc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive from %s: %v", dlsrc, err)
	}
	if err := rcv.DeadLetterMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}
	rcv.Close(ctx)
	got = receive(1, dlsrc, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueTransfer})
	if r := got[0].DeadLetterReason; r == nil || *r != broker.ReasonForwardEntityNotFound {
		t.Fatalf("forward to a deleted queue: reason %v", r)
	}

	// dst's owner stops without a hand-off while src keeps forwarding
	// into it; a survivor takes dst and lands what waited.
	send(src, 30, 80)
	victim := winner[dst]
	nodes[victim].cluster.halt()
	stop(t, nodes[victim])
	send(src, 80, 130)
	survivors := slices.DeleteFunc(slices.Clone(ids), func(s string) bool { return s == victim })
	waitFor(t, ctx, func() bool {
		for _, id := range survivors {
			if _, ok := nodes[id].Broker().EntityStoreID(dst); ok {
				return true
			}
		}
		return false
	}, "a survivor to take "+dst)
	for _, id := range survivors {
		if _, ok := nodes[id].Broker().EntityStoreID(dst); ok {
			t.Logf("%s took %s (%s is on %s)", id, dst, src, winner[src])
		}
	}
	inOrder(src+" → "+dst+" across the crash of its owner", receive(100, dst, nil), 30, 130)
}
