"""Fault injection (busbar serve --faults, POST /$faults) with the Python SDK:
server-busy is retried by the SDK until the faults run out; a lost lock is
the application's to handle (receive again)."""

import base64
import hashlib
import hmac
import json
import time
import urllib.parse
import urllib.request

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessageLockLostError, ServiceBusServerBusyError
from azure.servicebus.management import ServiceBusAdministrationClient

from conftest import KEY, KEY_NAME, serve_broker
from support import body, receive_n, unique


@pytest.fixture(scope="module")
def fault_broker():
    yield from serve_broker(["--faults"])


def sas_token(audience):
    sr = urllib.parse.quote_plus(audience).lower()
    se = str(int(time.time()) + 3600)
    sig = base64.b64encode(hmac.new(KEY.encode(), (sr + "\n" + se).encode(), hashlib.sha256).digest()).decode()
    return "SharedAccessSignature sr=%s&sig=%s&se=%s&skn=%s" % (sr, urllib.parse.quote_plus(sig), se, KEY_NAME)


def api(broker, method, path, payload=None):
    """Busbar's admin API over plain HTTP, with a Manage token."""
    host = broker.ready["http"]
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request("http://%s%s" % (host, path), data=data, method=method,
                                 headers={"Authorization": sas_token("sb://%s/" % host),
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def injected(broker, kind):
    return api(broker, "GET", "/$faults")["injected"].get(kind, 0)


@pytest.fixture
def fault_queue(fault_broker):
    name = unique("q")
    with ServiceBusAdministrationClient.from_connection_string(
            fault_broker.connection_string(fault_broker.https_port)) as adm:
        adm.create_queue(name)
    return name


def sdk_client(broker, retries):
    return ServiceBusClient.from_connection_string(
        broker.connection_string(), connection_verify=broker.certificate,
        retry_total=retries, retry_backoff_factor=0.05)


def test_server_busy_send_is_retried(fault_broker, fault_queue):
    api(fault_broker, "POST", "/$faults", {"kind": "server-busy", "entity": fault_queue, "count": 2, "retryAfter": "1s"})
    with sdk_client(fault_broker, 3) as c:
        with c.get_queue_sender(fault_queue) as sender:
            sender.send_messages(ServiceBusMessage("through"))
        assert injected(fault_broker, "server-busy") >= 2
        with c.get_queue_receiver(fault_queue) as receiver:
            [m] = receive_n(receiver, 1)
            assert body(m) == b"through"
            receiver.complete_message(m)


def test_server_busy_beyond_retries(fault_broker, fault_queue):
    api(fault_broker, "POST", "/$faults", {"kind": "server-busy", "entity": fault_queue, "count": 10})
    try:
        with sdk_client(fault_broker, 1) as c:
            with c.get_queue_sender(fault_queue) as sender:
                with pytest.raises(ServiceBusServerBusyError) as err:
                    sender.send_messages(ServiceBusMessage("x"))
                assert "Please wait 2 seconds" in str(err.value)
    finally:
        api(fault_broker, "DELETE", "/$faults")


def test_lock_lost_on_renew(fault_broker, fault_queue):
    # azure-servicebus on uamqp does not read the outcome of a settlement
    # on the receive link (its own comment: azure-uamqp-c issue 274), so a
    # lock lost there reaches it only as the message coming back. What it
    # does read are $management answers: the lock renewal here.
    with sdk_client(fault_broker, 1) as c:
        with c.get_queue_sender(fault_queue) as sender:
            sender.send_messages(ServiceBusMessage("again"))
        api(fault_broker, "POST", "/$faults", {"kind": "lock-lost", "entity": fault_queue, "op": "management"})
        with c.get_queue_receiver(fault_queue) as receiver:
            [m] = receive_n(receiver, 1)
            with pytest.raises(MessageLockLostError):
                receiver.renew_message_lock(m)
            # The application's path: receive it again.
            [m2] = receive_n(receiver, 1)
            assert body(m2) == b"again" and m2.delivery_count == m.delivery_count + 1
            receiver.complete_message(m2)
    assert injected(fault_broker, "lock-lost") == 1


def test_lock_lost_on_complete_comes_back(fault_broker, fault_queue):
    with sdk_client(fault_broker, 1) as c:
        with c.get_queue_sender(fault_queue) as sender:
            sender.send_messages(ServiceBusMessage("back"))
        before = injected(fault_broker, "lock-lost")
        api(fault_broker, "POST", "/$faults", {"kind": "lock-lost", "entity": fault_queue})
        with c.get_queue_receiver(fault_queue) as receiver:
            [m] = receive_n(receiver, 1)
            receiver.complete_message(m)  # uamqp does not see the refusal
            [m2] = receive_n(receiver, 1)
            assert body(m2) == b"back" and m2.delivery_count == m.delivery_count + 1
            receiver.complete_message(m2)
    assert injected(fault_broker, "lock-lost") == before + 1
