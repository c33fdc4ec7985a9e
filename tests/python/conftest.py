"""Fixtures for the Python SDK suite: a real Busbar and the official clients.

One `busbar serve --memory` per test session, on loopback ports the kernel
picks, with TLS (--amqps, --https, --dev-tls): azure-servicebus 7.8.2 (on
Azure's C uamqp) speaks AMQP only over TLS or WebSockets and ignores
UseDevelopmentEmulator. Nothing here stands in for the SDK; every call goes
through the real clients to the real broker.

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
    """A running `busbar serve`; the fields come from its "busbar ready" line."""

    def __init__(self, ready, proc, work, log_path):
        self.ready = ready
        self.proc = proc
        self.work = work
        self.log_path = log_path
        self.amqps_port = int(ready["amqps"].rsplit(":", 1)[1])
        self.https_port = int(ready["https"].rsplit(":", 1)[1])
        self.certificate = ready["dev_certificate"]

    def connection_string(self, port=None):
        """The connection string an application would use. With port it
        names the --https port: the admin client needs it, and the AMQP
        client ignores it (it always dials 5671)."""
        host = "localhost" if port is None else "localhost:%d" % port
        return "Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s" % (host, KEY_NAME, KEY)

    def log_tail(self, n=40):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-n:])


def _start_broker(extra_args=()):
    work = tempfile.mkdtemp(prefix="busbar-py-")
    binary = _busbar_binary(work)
    log_path = os.path.join(work, "busbar.log")
    args = [
        binary, "serve", "--memory",
        "--amqp", "127.0.0.1:0", "--http", "127.0.0.1:0",
        "--amqps", "127.0.0.1:0", "--https", "127.0.0.1:0", "--dev-tls",
        "--log-format", "json", "--log-level", os.environ.get("BUSBAR_PY_LOG_LEVEL", "info"),
    ] + list(extra_args)
    # A private TMPDIR keeps this broker's development certificate apart
    # from other brokers running in parallel (with --memory it is written
    # under the temporary directory).
    env = dict(os.environ, TMPDIR=work)
    proc = subprocess.Popen(args, cwd=work, env=env, stdin=subprocess.DEVNULL,
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
    return Broker(found, proc, work, log_path), pumper


@pytest.fixture(scope="session")
def broker():
    yield from serve_broker()


def serve_broker(extra_args=()):
    """Runs a broker (busbar serve with extra_args) for a fixture: yields
    it, pointed at by the SDK, and stops it."""
    b, pumper = _start_broker(extra_args)
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
        b.proc.send_signal(signal.SIGTERM)
        try:
            code = b.proc.wait(20)
        except subprocess.TimeoutExpired:
            b.proc.kill()
            code = b.proc.wait()
        pumper.join(5)
        if code != 0:
            pytest.fail("busbar exited with %s; log: %s" % (code, b.log_path))
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
