"""Queues with the Python SDK: send, receive and every settlement."""

import datetime
import time

from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)

from support import body, props, receive_n, receive_none, unique


def test_send_receive_complete(client, queue):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(ServiceBusMessage(
            "hello", application_properties={"kind": "greeting", "n": 7}, message_id="m-1",
            content_type="text/plain", correlation_id="c-1", subject="greet", reply_to="replies",
            to="someone"))
    with client.get_queue_receiver(queue) as receiver:
        [m] = receive_n(receiver, 1)
        assert body(m) == b"hello"
        assert props(m) == {"kind": "greeting", "n": 7}
        assert (m.message_id, m.content_type, m.correlation_id, m.subject, m.reply_to, m.to) == \
            ("m-1", "text/plain", "c-1", "greet", "replies", "someone")
        assert m.sequence_number == 1 and m.delivery_count == 0
        assert m.enqueued_time_utc is not None and m.locked_until_utc > m.enqueued_time_utc
        receiver.complete_message(m)
        receive_none(receiver)
        assert receiver.peek_messages(max_message_count=10, sequence_number=0) == []


def test_receive_and_delete(client, queue):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage("r%d" % i) for i in range(3)])
    with client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
        got = receive_n(receiver, 3)
        assert [body(m) for m in got] == [b"r0", b"r1", b"r2"]
    with client.get_queue_receiver(queue) as receiver:
        receive_none(receiver)


def test_abandon_redelivers(client, queue):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(ServiceBusMessage("again"))
    with client.get_queue_receiver(queue) as receiver:
        [m] = receive_n(receiver, 1)
        receiver.abandon_message(m)
        [m] = receive_n(receiver, 1)
        assert body(m) == b"again" and m.delivery_count == 1
        receiver.complete_message(m)


def test_defer_and_receive_deferred(client, queue):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage("later"), ServiceBusMessage("now")])
    with client.get_queue_receiver(queue) as receiver:
        first, second = receive_n(receiver, 2)
        seq = first.sequence_number
        receiver.defer_message(first)
        receiver.complete_message(second)
        receive_none(receiver)
        [d] = receiver.receive_deferred_messages([seq])
        assert body(d) == b"later" and d.sequence_number == seq
        receiver.complete_message(d)
        assert receiver.peek_messages(max_message_count=10, sequence_number=0) == []

    # Deferred and asked for at once: the disposition (on the receiver's
    # link) is applied before the management request that follows it.
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage("at-once-%d" % i) for i in range(3)])
    with client.get_queue_receiver(queue) as receiver:
        for m in receive_n(receiver, 3):
            receiver.defer_message(m)
            [d] = receiver.receive_deferred_messages([m.sequence_number])
            assert body(d) == body(m)
            receiver.complete_message(d)


def test_dead_letter_and_dlq(client, queue):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(ServiceBusMessage("poison"))
    with client.get_queue_receiver(queue) as receiver:
        [m] = receive_n(receiver, 1)
        receiver.dead_letter_message(m, reason="bad-input", error_description="cannot parse")
        receive_none(receiver)
    with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        [d] = receive_n(dlq, 1)
        assert body(d) == b"poison"
        assert d.dead_letter_reason == "bad-input"
        assert d.dead_letter_error_description == "cannot parse"
        dlq.complete_message(d)


def test_peek(client, queue):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage("p%d" % i) for i in range(5)])
    with client.get_queue_receiver(queue) as receiver:
        peeked = receiver.peek_messages(max_message_count=10, sequence_number=0)
        assert [body(m) for m in peeked] == [b"p%d" % i for i in range(5)]
        assert [m.sequence_number for m in peeked] == [1, 2, 3, 4, 5]
        later = receiver.peek_messages(max_message_count=2, sequence_number=4)
        assert [m.sequence_number for m in later] == [4, 5]
        # Peeking locks nothing: all five can be received.
        got = receive_n(receiver, 5)
        for m in got:
            receiver.complete_message(m)


def test_schedule_and_cancel(client, queue):
    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    with client.get_queue_sender(queue) as sender:
        seqs = sender.schedule_messages([ServiceBusMessage("s1"), ServiceBusMessage("s2")], at)
        assert len(seqs) == 2
        with client.get_queue_receiver(queue) as receiver:
            peeked = receiver.peek_messages(max_message_count=10, sequence_number=0)
            assert [m.sequence_number for m in peeked] == seqs
            assert all(abs((m.scheduled_enqueue_time_utc - at).total_seconds()) < 1 for m in peeked)
            sender.cancel_scheduled_messages(seqs[0])
            peeked = receiver.peek_messages(max_message_count=10, sequence_number=0)
            assert [m.sequence_number for m in peeked] == seqs[1:]
            receive_none(receiver)
            # Due soon: delivered when due.
            soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(milliseconds=500)
            sender.schedule_messages(ServiceBusMessage("soon"), soon)
            [m] = receive_n(receiver, 1)
            assert body(m) == b"soon"
            receiver.complete_message(m)


def test_batch(client, queue):
    with client.get_queue_sender(queue) as sender:
        batch = sender.create_message_batch()
        assert batch.max_size_in_bytes == 256 * 1024
        for i in range(20):
            batch.add_message(ServiceBusMessage("b%d" % i, application_properties={"i": i}))
        sender.send_messages(batch)
    with client.get_queue_receiver(queue) as receiver:
        got = receive_n(receiver, 20)
        assert [body(m) for m in got] == [b"b%d" % i for i in range(20)]
        assert [props(m)["i"] for m in got] == list(range(20))
        for m in got:
            receiver.complete_message(m)


def test_ttl_to_dead_letter(client, admin):
    name = unique("ttl")
    admin.create_queue(name, dead_lettering_on_message_expiration=True)
    with client.get_queue_sender(name) as sender:
        # The SDK keeps whole seconds of a time to live.
        sender.send_messages(ServiceBusMessage("short-lived", time_to_live=datetime.timedelta(seconds=1)))
    time.sleep(1.2)
    with client.get_queue_receiver(name) as receiver:
        receive_none(receiver)
    with client.get_queue_receiver(name, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        [d] = receive_n(dlq, 1)
        assert body(d) == b"short-lived"
        assert d.dead_letter_reason == "TTLExpiredException"
        dlq.complete_message(d)


def test_lock_renew(client, admin):
    name = unique("lock")
    admin.create_queue(name, lock_duration=datetime.timedelta(seconds=5))
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage("held"))
    with client.get_queue_receiver(name) as receiver:
        [m] = receive_n(receiver, 1)
        first = m.locked_until_utc
        time.sleep(1.1)
        renewed = receiver.renew_message_lock(m)
        assert renewed > first and m.locked_until_utc == renewed
        receiver.complete_message(m)


def test_connection_string_with_a_port(broker, queue):
    """The AMQP client dials 5671 whatever port the endpoint names (here the
    admin API's), and signs its token for the endpoint as written."""
    from azure.servicebus import ServiceBusClient
    with ServiceBusClient.from_connection_string(
            broker.connection_string(broker.https_port), connection_verify=broker.certificate) as c:
        with c.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("port"))
        with c.get_queue_receiver(queue) as receiver:
            [m] = receive_n(receiver, 1)
            assert body(m) == b"port"
            receiver.complete_message(m)
