"""Small helpers shared by the test files (nothing here stands in for the SDK)."""

import time
import uuid


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:10])


def receive_n(receiver, n, timeout=15, max_wait_time=1):
    """Receives exactly n messages, failing after timeout seconds."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        if time.monotonic() > deadline:
            raise AssertionError("received %d of %d messages in %ss" % (len(out), n, timeout))
        out.extend(receiver.receive_messages(max_message_count=n - len(out), max_wait_time=max_wait_time))
    return out


def receive_none(receiver, wait=1):
    """Checks that nothing arrives within wait seconds."""
    got = receiver.receive_messages(max_message_count=1, max_wait_time=wait)
    assert not got, "unexpected message %r" % ([str(m) for m in got],)


def body(message):
    """The body of a received message as bytes."""
    return b"".join(message.body)


def props(message):
    """application_properties with str keys (uamqp hands out bytes)."""
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in (message.application_properties or {}).items()}
