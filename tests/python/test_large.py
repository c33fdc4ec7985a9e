"""Messages up to the 256 KiB limit, and one of 10 MB, with the Python SDK.

uamqp splits what it sends by the broker's max-frame-size but encodes no
frame larger than its own 65536: everything here crosses several frames,
and worked only once Busbar advertised 65536 as Service Bus does.
"""

import datetime
import hashlib
import os
import time

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import MessageSizeExceededError

from support import body, props, receive_n, unique

LIMIT = 256 * 1024


def near_limit(fill):
    """A body that fits the limit with its envelope."""
    return bytes([fill]) * (LIMIT - 1024)


def test_send_receive_256k(client, queue):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(ServiceBusMessage(near_limit(1), application_properties={"n": 1}))
        sender.send_messages(ServiceBusMessage(near_limit(2)))
    with client.get_queue_receiver(queue) as receiver:
        peeked = receiver.peek_messages(max_message_count=10, sequence_number=0)
        assert [body(m) for m in peeked] == [near_limit(1), near_limit(2)]
        got = receive_n(receiver, 2)
        assert [body(m) for m in got] == [near_limit(1), near_limit(2)]
        for m in got:
            receiver.complete_message(m)


def test_batch_over_64k(client, queue):
    payloads = [bytes([i]) * (60 * 1024) for i in range(4)]
    with client.get_queue_sender(queue) as sender:
        batch = sender.create_message_batch()
        for p in payloads:
            batch.add_message(ServiceBusMessage(p))
        assert batch.size_in_bytes > 3 * 64 * 1024
        sender.send_messages(batch)
        # A list is sent as one batch too.
        sender.send_messages([ServiceBusMessage(p) for p in payloads[:2]])
    with client.get_queue_receiver(queue) as receiver:
        got = receive_n(receiver, 6)
        assert [body(m) for m in got] == payloads + payloads[:2]
        for m in got:
            receiver.complete_message(m)


def test_schedule_over_64k(client, queue):
    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    with client.get_queue_sender(queue) as sender:
        # One request carries the messages: together they stay under the limit.
        seqs = sender.schedule_messages(ServiceBusMessage(near_limit(3)), at)
        seqs += sender.schedule_messages([ServiceBusMessage(b"\x04" * 100_000), ServiceBusMessage(b"\x05" * 100_000)], at)
        assert len(seqs) == 3
        with client.get_queue_receiver(queue) as receiver:
            peeked = receiver.peek_messages(max_message_count=10, sequence_number=0)
            assert [body(m) for m in peeked] == [near_limit(3), b"\x04" * 100_000, b"\x05" * 100_000]
            sender.cancel_scheduled_messages(seqs)
            assert receiver.peek_messages(max_message_count=10, sequence_number=0) == []
            soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(milliseconds=300)
            sender.schedule_messages(ServiceBusMessage(near_limit(5)), soon)
            [m] = receive_n(receiver, 1)
            assert body(m) == near_limit(5)
            receiver.complete_message(m)


def test_over_the_limit_is_message_size_exceeded(client, queue):
    with client.get_queue_sender(queue) as sender:
        start = time.monotonic()
        with pytest.raises(MessageSizeExceededError):
            sender.send_messages(ServiceBusMessage(b"x" * (LIMIT + 1)))
        # Refused, not retried until a time-out.
        assert time.monotonic() - start < 5
        batch = sender.create_message_batch()
        batch.add_message(ServiceBusMessage(near_limit(6)))
        with pytest.raises(MessageSizeExceededError):
            batch.add_message(ServiceBusMessage(b"y" * 2048))
        # The sender still works.
        sender.send_messages(ServiceBusMessage("small"))
    with client.get_queue_receiver(queue) as receiver:
        [m] = receive_n(receiver, 1)
        assert body(m) == b"small"
        receiver.complete_message(m)


def test_ten_megabytes(client, admin, monkeypatch):
    """A 10 MB message (over the large-message threshold: spooled, stored
    and sent a frame at a time) through a queue allowed 11 MB; the body is
    checked by hash.

    uamqp attaches its receivers with max-message-size 1 MiB (its
    MAX_MESSAGE_LENGTH_BYTES, read when a link is made; the SDK passes no
    other), and the broker honours it: an application receiving larger
    messages with this SDK raises that constant, as here."""
    import uamqp.constants

    monkeypatch.setattr(uamqp.constants, "MAX_MESSAGE_LENGTH_BYTES", 16 * 1024 * 1024)
    name = unique("big")
    admin.create_queue(name, max_message_size_in_kilobytes=11 * 1024)
    payload = os.urandom(10 * 1024 * 1024)
    want = hashlib.sha256(payload).hexdigest()
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage(payload, application_properties={"sha256": want}))
    with client.get_queue_receiver(name) as receiver:
        [p] = receiver.peek_messages(max_message_count=1, sequence_number=0)
        assert hashlib.sha256(body(p)).hexdigest() == want
        [m] = receive_n(receiver, 1, timeout=60, max_wait_time=5)
        assert hashlib.sha256(body(m)).hexdigest() == want
        assert props(m)["sha256"] == want
        receiver.complete_message(m)
        assert receiver.peek_messages(max_message_count=1, sequence_number=0) == []
