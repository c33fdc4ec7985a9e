"""AMQP over WebSockets with the Python SDK (TransportType.AmqpOverWebsocket).

uamqp opens wss://HOST:PORT/$servicebus/websocket/ with the subprotocol
AMQPWSB10; `custom_endpoint_address` names the port (it defaults to 443),
here Busbar's --https listener.
"""

import base64
import os
import socket
import ssl

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType

from support import body, receive_n

LARGE = b"w" * (200 * 1024)


def websocket_status(broker):
    """The HTTP status of the upgrade uamqp sends, asked with a socket."""
    ctx = ssl.create_default_context(cafile=broker.certificate)
    with socket.create_connection(("localhost", broker.https_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            key = base64.b64encode(os.urandom(16)).decode()
            s.sendall((
                "GET /$servicebus/websocket/ HTTP/1.1\r\n"
                "Host: localhost:%d\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Protocol: AMQPWSB10\r\n\r\n" % (broker.https_port, key)).encode())
            status_line = s.recv(4096).split(b"\r\n", 1)[0].decode()
    return int(status_line.split()[1])


def test_amqp_over_websocket(broker, queue):
    status = websocket_status(broker)
    if status in (401, 404):
        pytest.skip("this broker has no WebSocket endpoint (the upgrade got HTTP %d)" % status)
    assert status == 101, "the WebSocket upgrade got HTTP %d" % status
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
