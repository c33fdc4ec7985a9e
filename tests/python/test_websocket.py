"""AMQP over WebSockets with the Python SDK (TransportType.AmqpOverWebsocket).

uamqp opens wss://HOST:PORT/$servicebus/websocket/ (with a trailing slash)
and offers the subprotocol AMQPWSB10 only, where the other SDKs ask for
/$servicebus/websocket and "amqp"; `custom_endpoint_address` names the port
(it defaults to 443), here Busbar's --https listener. The test is skipped,
saying so, only when the broker upgrades neither request: it has no
WebSocket endpoint.
"""

import base64
import os
import socket
import ssl

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType

from support import body, receive_n

LARGE = b"w" * (200 * 1024)


def upgrade_status(broker, path, protocol):
    """The HTTP status of a WebSocket upgrade to the --https listener."""
    ctx = ssl.create_default_context(cafile=broker.certificate)
    with socket.create_connection(("localhost", broker.https_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            key = base64.b64encode(os.urandom(16)).decode()
            s.sendall((
                "GET %s HTTP/1.1\r\n"
                "Host: localhost:%d\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Protocol: %s\r\n\r\n" % (path, broker.https_port, key, protocol)).encode())
            status_line = s.recv(4096).split(b"\r\n", 1)[0].decode()
    return int(status_line.split()[1])


def test_amqp_over_websocket(broker, queue):
    # The endpoint as the other SDKs ask for it, and as uamqp does.
    standard = upgrade_status(broker, "/$servicebus/websocket", "amqp")
    uamqp = upgrade_status(broker, "/$servicebus/websocket/", "AMQPWSB10")
    if standard != 101 and uamqp != 101:
        pytest.skip("this broker has no WebSocket endpoint (the upgrade got HTTP %d)" % standard)
    assert uamqp == 101, "uamqp's upgrade (trailing slash, subprotocol AMQPWSB10) got HTTP %d" % uamqp
    with ServiceBusClient.from_connection_string(
            broker.connection_string(), transport_type=TransportType.AmqpOverWebsocket,
            custom_endpoint_address="sb://localhost:%d" % broker.https_port,
            connection_verify=broker.certificate, retry_total=1) as ws_client:
        with ws_client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage("over websockets"), ServiceBusMessage(LARGE)])
        with ws_client.get_queue_receiver(queue) as receiver:
            got = receive_n(receiver, 2)
            assert [body(m) for m in got] == [b"over websockets", LARGE]
            for m in got:
                receiver.complete_message(m)
