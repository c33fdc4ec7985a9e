"""Several namespaces (docs/namespaces.md) with azure-servicebus: with
--namespace-per-key-name each SharedAccessKeyName has a namespace of its
own, made on first use with the default namespace's Config.json entities,
so the same queue name holds only that key name's messages. The admin
client works in the namespace its key name selects too."""

import json
import os
import tempfile

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient

from conftest import KEY, serve_broker
from support import body


@pytest.fixture(scope="module")
def ns_broker():
    work = tempfile.mkdtemp(prefix="busbar-py-ns-")
    config = os.path.join(work, "Config.json")
    with open(config, "w", encoding="utf-8") as f:
        json.dump({"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "orders"}]}]}}, f)
    yield from serve_broker(["--config", config, "--namespace-per-key-name"])


def connection_string(key_name, port=None):
    host = "localhost" if port is None else "localhost:%d" % port
    return "Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s" % (host, key_name, KEY)


def messaging(broker, key_name):
    return ServiceBusClient.from_connection_string(
        connection_string(key_name), connection_verify=broker.certificate, retry_total=1, retry_backoff_factor=0.1)


def test_each_key_name_has_its_own_namespace(ns_broker):
    for key_name in ("run-py-a", "run-py-b", "RootManageSharedAccessKey"):
        with messaging(ns_broker, key_name) as c, c.get_queue_sender("orders") as s:
            s.send_messages(ServiceBusMessage(key_name))
    for key_name in ("run-py-a", "run-py-b", "RootManageSharedAccessKey"):
        with messaging(ns_broker, key_name) as c, c.get_queue_receiver("orders") as r:
            assert [body(m) for m in r.peek_messages(max_message_count=50)] == [key_name.encode()]


def test_admin_client_in_a_key_names_namespace(ns_broker):
    admin = ServiceBusAdministrationClient.from_connection_string(connection_string("run-py-admin", ns_broker.https_port))
    try:
        admin.create_queue("only-here")
        assert sorted(q.name for q in admin.list_queues()) == ["only-here", "orders"]
    finally:
        admin.close()
    default = ServiceBusAdministrationClient.from_connection_string(
        connection_string("RootManageSharedAccessKey", ns_broker.https_port))
    try:
        assert [q.name for q in default.list_queues()] == ["orders"]
    finally:
        default.close()
