// Several namespaces (docs/namespaces.md) with @azure/service-bus: a
// namespace chosen by the connection string's host name, reached through
// customEndpointAddress, and a namespace per SharedAccessKeyName
// (--namespace-per-key-name). The same queue name in each namespace is
// its own queue.

import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { startBroker } from "../lib/broker.mjs";
import { sb } from "../lib/sb.mjs";

const config = {
  UserConfig: {
    Namespaces: [
      { Name: "sbemulatorns", Queues: [{ Name: "orders" }] },
      { Name: "other", Queues: [{ Name: "orders" }] },
    ],
  },
};

describe("namespaces", () => {
  let broker, port;

  before(async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "busbar-js-ns-"));
    const file = path.join(dir, "Config.json");
    writeFileSync(file, JSON.stringify(config));
    broker = await startBroker({ extraArgs: ["--config", file, "--namespace-per-key-name"] });
    port = broker.amqp.split(":").pop();
  });
  after(async () => {
    await broker?.stop();
  });

  const retryOptions = { maxRetries: 1, retryDelayInMs: 50, maxRetryDelayInMs: 50, timeoutInMs: 10000 };

  /** client connects to host (a namespace's host name) on the broker's port, with keyName. */
  const client = (host, keyName = "RootManageSharedAccessKey") =>
    new sb.ServiceBusClient(
      `Endpoint=sb://${host}:${port};SharedAccessKeyName=${keyName};SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;`,
      { customEndpointAddress: `amqp://127.0.0.1:${port}`, retryOptions },
    );

  async function send(c, body) {
    const sender = c.createSender("orders");
    await sender.sendMessages({ body });
    await sender.close();
  }

  async function peek(c) {
    const receiver = c.createReceiver("orders");
    const msgs = await receiver.peekMessages(50);
    await receiver.close();
    return msgs.map((m) => m.body).sort();
  }

  test("the host name chooses the namespace; messages do not cross", async () => {
    const def = client("localhost");
    const other = client("other.localhost");
    try {
      await send(def, "to-default");
      await send(other, "to-other");
      assert.deepEqual(await peek(def), ["to-default"]);
      assert.deepEqual(await peek(other), ["to-other"]);
    } finally {
      await def.close();
      await other.close();
    }
  });

  test("each SharedAccessKeyName has a namespace of its own", async () => {
    const runA = client("localhost", "run-js-a");
    const runB = client("localhost", "run-js-b");
    try {
      await send(runA, "a");
      await send(runB, "b");
      assert.deepEqual(await peek(runA), ["a"]);
      assert.deepEqual(await peek(runB), ["b"]);
    } finally {
      await runA.close();
      await runB.close();
    }
  });
});
