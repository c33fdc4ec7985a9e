"""Message sessions with the Python SDK."""

import time

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusMessage
from azure.servicebus.exceptions import SessionCannotBeLockedError

from support import body, receive_n, receive_none, unique


@pytest.fixture
def session_queue(admin):
    name = unique("sq")
    admin.create_queue(name, requires_session=True)
    return name


def test_sessions_in_order_and_apart(client, session_queue):
    with client.get_queue_sender(session_queue) as sender:
        sender.send_messages([ServiceBusMessage("%s%d" % (s, i), session_id=s) for i in range(3) for s in "ab"])
    with client.get_queue_receiver(session_queue, session_id="b") as receiver:
        assert receiver.session.session_id == "b"
        got = receive_n(receiver, 3)
        assert [body(m) for m in got] == [b"b0", b"b1", b"b2"]
        assert all(m.session_id == "b" for m in got)
        for m in got:
            receiver.complete_message(m)
        receive_none(receiver)
        # While b is held, nobody else gets it.
        with pytest.raises(SessionCannotBeLockedError):
            with client.get_queue_receiver(session_queue, session_id="b") as other:
                other.receive_messages(max_message_count=1, max_wait_time=1)
    with client.get_queue_receiver(session_queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5) as receiver:
        assert receiver.session.session_id == "a"
        got = receive_n(receiver, 3)
        assert [body(m) for m in got] == [b"a0", b"a1", b"a2"]
        for m in got:
            receiver.complete_message(m)


def test_session_state_and_renew(client, session_queue):
    with client.get_queue_sender(session_queue) as sender:
        sender.send_messages(ServiceBusMessage("x", session_id="s"))
    with client.get_queue_receiver(session_queue, session_id="s") as receiver:
        session = receiver.session
        assert not session.get_state()
        session.set_state("step 1")
        assert session.get_state() == b"step 1"
        # More than one 64 KiB frame each way.
        big = b"state-" * (100 * 1024 // 6)
        session.set_state(big)
        assert session.get_state() == big
        first = session.locked_until_utc
        time.sleep(1.1)
        renewed = session.renew_lock()
        assert renewed > first and session.locked_until_utc == renewed
        [m] = receive_n(receiver, 1)
        receiver.complete_message(m)
    # The state outlives the receiver.
    with client.get_queue_receiver(session_queue, session_id="s") as receiver:
        assert receiver.session.get_state() == big


def test_deferral_and_peek_in_session(client, session_queue):
    with client.get_queue_sender(session_queue) as sender:
        sender.send_messages([ServiceBusMessage("d%d" % i, session_id="d") for i in range(3)])
        sender.send_messages(ServiceBusMessage("other", session_id="e"))
    with client.get_queue_receiver(session_queue, session_id="d") as receiver:
        peeked = receiver.peek_messages(max_message_count=10, sequence_number=0)
        assert [body(m) for m in peeked] == [b"d0", b"d1", b"d2"]
        first, *rest = receive_n(receiver, 3)
        receiver.defer_message(first)
        for m in rest:
            receiver.complete_message(m)
        [d] = receiver.receive_deferred_messages([first.sequence_number])
        assert body(d) == b"d0"
        receiver.complete_message(d)
