"""Fixtures for the Python SDK suite: a real Busbar and the official clients.

One `busbar serve --memory` per test session, on loopback ports the kernel
picks, with TLS (--amqps, --https, --dev-tls): azure-servicebus 7.8.2 (on
Azure's C uamqp) speaks AMQP only over TLS or WebSockets and ignores
UseDevelopmentEmulator. Nothing here stands in for the SDK; every call goes
through the real clients to the real broker. With BUSBAR_TEST_CLUSTER (see
_start_cluster) each broker is three cluster nodes.

Two settings make the released SDK reach a broker on an ephemeral port:

- The AMQP client always dials port 5671 (uamqp's DEFAULT_AMQPS_PORT, copied
  into the SDK's configuration module) whatever the connection string says;
  only `custom_endpoint_address` changes the port, and it also switches to
  WebSockets. So the suite sets that module constant to the broker's --amqps
  port before any client is made. An application uses 5671 and needs
  nothing of the kind.
- The administration client ignores `connection_verify` (7.8.2 builds its
  HTTP pipeline without its keyword arguments), so the development
  certificate is trusted through REQUESTS_CA_BUNDLE. The AMQP client is
  given it with `connection_verify`.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest

from support import unique

REPO = Path(__file__).resolve().parents[2]
KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"


def _busbar_binary(tmp):
    binary = os.environ.get("BUSBAR_BIN")
    if binary:
        return binary
    binary = os.path.join(tmp, "busbar")
    subprocess.run(["go", "build", "-o", binary, "./cmd/busbar"], cwd=REPO, check=True)
    return binary


class Broker:
    """A running `busbar serve`, or three cluster nodes standing in for one:
    the fields come from a "busbar ready" line."""

    def __init__(self, nodes, work, admin=None):
        # nodes: (ready record, Popen, log path, log pump thread) for each
        # process. With several (a cluster), AMQP goes to the first and the
        # admin client (its connection string's port) to admin.
        self.nodes = nodes
        self.work = work
        self.ready = nodes[0][0]
        self.log_path = " ".join(n[2] for n in nodes)
        self.amqps_port = int(self.ready["amqps"].rsplit(":", 1)[1])
        self.https_port = int((admin or self.ready)["https"].rsplit(":", 1)[1])
        self.certificate = self.ready["dev_certificate"]

    def connection_string(self, port=None):
        """The connection string an application would use. With port it
        names the --https port: the admin client needs it, and the AMQP
        client ignores it (it always dials 5671)."""
        host = "localhost" if port is None else "localhost:%d" % port
        return "Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s" % (host, KEY_NAME, KEY)

    def log_tail(self, n=40):
        out = []
        for _, _, path, _ in self.nodes:
            with open(path, encoding="utf-8", errors="replace") as f:
                out.append("".join(f.readlines()[-n:]))
        return "\n".join(out)

    def stop(self):
        """Stops every process (SIGTERM, by its PID); their exit codes."""
        for _, proc, _, _ in self.nodes:
            proc.send_signal(signal.SIGTERM)
        codes = []
        for _, proc, _, pumper in self.nodes:
            try:
                codes.append(proc.wait(20))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
            pumper.join(5)
        return codes


def _spawn(binary, args, work, log_path):
    """Runs busbar with args in work (also its TMPDIR) until it logs
    "busbar ready": (that record, Popen, log_path, log pump thread)."""
    # A private TMPDIR keeps this broker's development certificate apart
    # from other brokers running in parallel (with --memory it is written
    # under the temporary directory).
    env = dict(os.environ, TMPDIR=work)
    proc = subprocess.Popen([binary] + args, cwd=work, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    found = {}
    got_ready = threading.Event()
    verbose = os.environ.get("BUSBAR_PY_VERBOSE") == "1"

    def pump():
        with open(log_path, "w", encoding="utf-8") as log:
            for raw in proc.stderr:
                line = raw.decode("utf-8", "replace")
                log.write(line)
                log.flush()
                if verbose:
                    sys.stderr.write("[busbar] " + line)
                if not got_ready.is_set():
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("msg") == "busbar ready":
                        found.update(rec)
                        got_ready.set()

    pumper = threading.Thread(target=pump, name="busbar-log", daemon=True)
    pumper.start()
    deadline = time.monotonic() + 30
    while not got_ready.wait(0.05):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pumper.join(5)
            with open(log_path, encoding="utf-8", errors="replace") as f:
                raise RuntimeError("busbar did not get ready (exit %s):\n%s" % (proc.returncode, f.read()))
    return found, proc, log_path, pumper


def _listeners():
    return [
        "--amqp", "127.0.0.1:0", "--http", "127.0.0.1:0",
        "--amqps", "127.0.0.1:0", "--https", "127.0.0.1:0", "--dev-tls",
        "--log-format", "json", "--log-level", os.environ.get("BUSBAR_PY_LOG_LEVEL", "info"),
    ]


def _start_broker(extra_args=()):
    if os.environ.get("BUSBAR_TEST_CLUSTER"):
        return _start_cluster(extra_args)
    work = tempfile.mkdtemp(prefix="busbar-py-")
    binary = _busbar_binary(work)
    args = ["serve", "--memory"] + _listeners() + list(extra_args)
    return Broker([_spawn(binary, args, work, os.path.join(work, "busbar.log"))], work)


# Cluster mode (BUSBAR_TEST_CLUSTER=postgres://… naming a PostgreSQL
# server, set by tests/cluster/run.sh): each broker is three `busbar serve
# --cluster` nodes on a database of their own there, with short timings.
# The AMQP clients dial one node and the admin client another, a different
# pair for each broker of the run, so entities are created through one node
# and used through another.
_CLUSTER_TIMINGS = [
    "--cluster-heartbeat", "200ms", "--cluster-lease-ttl", "3s",
    "--cluster-trust-margin", "1s", "--cluster-poll", "200ms",
]
_cluster_instances = [0]


def _start_cluster(extra_args):
    server = os.environ["BUSBAR_TEST_CLUSTER"]
    db = "t_" + uuid.uuid4().hex[:12]
    subprocess.run(["psql", server, "-qc", "CREATE DATABASE " + db], check=True, stdout=subprocess.DEVNULL)
    parts = urllib.parse.urlsplit(server)
    store = urllib.parse.urlunsplit(parts._replace(path="/" + db))
    work = tempfile.mkdtemp(prefix="busbar-py-cluster-")
    binary = _busbar_binary(work)
    secret = uuid.uuid4().hex + uuid.uuid4().hex
    nodes = []

    def start(k):
        # --data is shared: node 1 writes the development certificate
        # first, the others then use it, so one certificate serves all.
        args = ["serve", "--cluster", "--store", store, "--data", os.path.join(work, "data"),
                "--node-id", "n%d" % k, "--cluster-listen", "127.0.0.1:0", "--cluster-secret", secret,
                ] + _CLUSTER_TIMINGS + _listeners() + list(extra_args)
        nodes.append(_spawn(binary, args, work, os.path.join(work, "n%d.log" % k)))

    try:
        for k in (1, 2, 3):
            start(k)
    except BaseException:
        if nodes:
            Broker(nodes, work).stop()
        raise
    # Two polls, so that each node has seen the others before the first
    # entity is created (placement then sends it where it stays).
    time.sleep(0.5)
    k = _cluster_instances[0]
    _cluster_instances[0] += 1
    amqp = nodes[k % 3:] + nodes[:k % 3]
    return Broker(amqp, work, admin=amqp[1][0])


@pytest.fixture(scope="session")
def broker():
    yield from serve_broker()


def serve_broker(extra_args=()):
    """Runs a broker (busbar serve with extra_args) for a fixture: yields
    it, pointed at by the SDK, and stops it."""
    b = _start_broker(extra_args)
    # See the module doc: the AMQP port, and the certificate for the
    # admin client's HTTP stack.
    import azure.servicebus._common._configuration as sb_configuration
    saved_port = sb_configuration.DEFAULT_AMQPS_PORT
    sb_configuration.DEFAULT_AMQPS_PORT = b.amqps_port
    saved_bundle = os.environ.get("REQUESTS_CA_BUNDLE")
    os.environ["REQUESTS_CA_BUNDLE"] = b.certificate
    try:
        yield b
    finally:
        sb_configuration.DEFAULT_AMQPS_PORT = saved_port
        if saved_bundle is None:
            os.environ.pop("REQUESTS_CA_BUNDLE", None)
        else:
            os.environ["REQUESTS_CA_BUNDLE"] = saved_bundle
        codes = b.stop()
        if any(code != 0 for code in codes):
            pytest.fail("busbar exited with %s; log: %s" % (codes, b.log_path))
        if os.environ.get("BUSBAR_PY_KEEP_LOGS") != "1":
            shutil.rmtree(b.work, ignore_errors=True)


@pytest.fixture(scope="session")
def admin(broker):
    from azure.servicebus.management import ServiceBusAdministrationClient
    client = ServiceBusAdministrationClient.from_connection_string(broker.connection_string(broker.https_port))
    yield client
    client.close()


@pytest.fixture(scope="session")
def client(broker):
    from azure.servicebus import ServiceBusClient
    c = ServiceBusClient.from_connection_string(
        broker.connection_string(), connection_verify=broker.certificate,
        retry_total=int(os.environ.get("BUSBAR_PY_RETRIES", "1")), retry_backoff_factor=0.1)
    yield c
    c.close()


@pytest.fixture
def queue(admin):
    """A fresh queue with the default properties; its name."""
    name = unique("q")
    admin.create_queue(name)
    return name
