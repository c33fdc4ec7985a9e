"""Time control (busbar serve --test-clock, POST /$time/advance) with the
Python SDK: a message's time to live and a message lock run out when the
test clock moves forward, without sleeping through them."""

import datetime

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue, ServiceBusClient
from azure.servicebus.exceptions import MessageLockLostError
from azure.servicebus.management import ServiceBusAdministrationClient

from conftest import serve_broker
from support import body, receive_n, receive_none, unique
from test_faults import api


@pytest.fixture(scope="module")
def clock_broker():
    yield from serve_broker(["--test-clock"])


@pytest.fixture
def clock_queue(clock_broker):
    name = unique("q")
    with ServiceBusAdministrationClient.from_connection_string(
            clock_broker.connection_string(clock_broker.https_port)) as adm:
        adm.create_queue(name, lock_duration=datetime.timedelta(minutes=5),
                         dead_lettering_on_message_expiration=True)
    return name


def sdk_client(broker):
    return ServiceBusClient.from_connection_string(
        broker.connection_string(), connection_verify=broker.certificate,
        retry_total=1, retry_backoff_factor=0.05)


def advance(broker, by):
    return api(broker, "POST", "/$time/advance", {"by": by})


def test_ttl_dead_letters_after_advance(clock_broker, clock_queue):
    with sdk_client(clock_broker) as c:
        with c.get_queue_sender(clock_queue) as sender:
            sender.send_messages(ServiceBusMessage("short-lived", time_to_live=datetime.timedelta(hours=1)))
        with c.get_queue_receiver(clock_queue) as receiver:
            advance(clock_broker, "2h")
            receive_none(receiver)
        with c.get_queue_receiver(clock_queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            [m] = receive_n(dlq, 1)
            assert body(m) == b"short-lived"
            assert m.dead_letter_reason == "TTLExpiredException"
            dlq.complete_message(m)


def test_lock_expires_after_advance(clock_broker, clock_queue):
    with sdk_client(clock_broker) as c:
        with c.get_queue_sender(clock_queue) as sender:
            sender.send_messages(ServiceBusMessage("locked"))
        with c.get_queue_receiver(clock_queue) as receiver:
            [m] = receive_n(receiver, 1)
            now = datetime.datetime.fromisoformat(api(clock_broker, "GET", "/$time")["now"].replace("Z", "+00:00"))
            assert abs((m.locked_until_utc - now) - datetime.timedelta(minutes=5)) < datetime.timedelta(seconds=10)
            advance(clock_broker, "6m")
            # uamqp reads $management answers (not link settlement outcomes):
            # the renewal sees the lost lock.
            with pytest.raises(MessageLockLostError):
                receiver.renew_message_lock(m)
            [again] = receive_n(receiver, 1)
            assert body(again) == b"locked" and again.delivery_count == m.delivery_count + 1
            receiver.complete_message(again)


def test_health_reports_the_test_clock(clock_broker):
    import json
    import urllib.request
    with urllib.request.urlopen("http://%s/health" % clock_broker.ready["http"], timeout=10) as resp:
        h = json.loads(resp.read())
    assert h["testClock"] is True and h["testTime"]
