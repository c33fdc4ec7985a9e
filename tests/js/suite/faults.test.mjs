// Fault injection (busbar serve --faults, POST /$faults): the JS SDK's
// retry paths against faults a test can order. server-busy is retried by
// the SDK until the faults run out; a lost lock is the application's to
// handle (receive again); a management answer that never comes is retried
// after the SDK's own timeout.

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { KEY, KEY_NAME, startBroker } from "../lib/broker.mjs";
import { createQueue, expectError, sb } from "../lib/sb.mjs";

/** sasToken signs a token for audience as the SDKs do. */
function sasToken(audience) {
  const sr = encodeURIComponent(audience).toLowerCase();
  const se = Math.floor(Date.now() / 1000) + 3600;
  const sig = createHmac("sha256", KEY).update(`${sr}\n${se}`).digest("base64");
  return `SharedAccessSignature sr=${sr}&sig=${encodeURIComponent(sig)}&se=${se}&skn=${KEY_NAME}`;
}

describe("faults", () => {
  let broker;

  before(async () => {
    broker = await startBroker({ extraArgs: ["--faults"] });
  });
  after(async () => {
    await broker?.stop();
  });

  /** api calls Busbar's admin API with a Manage token. */
  async function api(method, path, body) {
    const res = await fetch(`http://${broker.http}${path}`, {
      method,
      headers: { Authorization: sasToken(`sb://${broker.http}/`), "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    assert.ok(res.ok, `${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text);
  }
  const injected = async (kind) => (await api("GET", "/$faults")).injected[kind] ?? 0;

  const client = () =>
    new sb.ServiceBusClient(broker.connectionString(), {
      retryOptions: { maxRetries: 3, retryDelayInMs: 50, maxRetryDelayInMs: 200, timeoutInMs: 3000 },
    });

  test("server-busy on send: the SDK retries until the faults run out", async () => {
    const queue = await createQueue(broker);
    const c = client();
    try {
      const before = await injected("server-busy");
      await api("POST", "/$faults", { kind: "server-busy", entity: queue, count: 2, retryAfter: "1s" });
      await c.createSender(queue).sendMessages({ body: "through" });
      assert.equal((await injected("server-busy")) - before, 2);
      const [m] = await c.createReceiver(queue, { receiveMode: "receiveAndDelete" }).receiveMessages(1, { maxWaitTimeInMs: 5000 });
      assert.equal(m?.body, "through");
    } finally {
      await c.close();
    }
  });

  test("server-busy beyond the retries: ServiceBusy, retryable", async () => {
    const queue = await createQueue(broker);
    const c = client();
    try {
      await api("POST", "/$faults", { kind: "server-busy", entity: queue, count: 10 });
      // After the last retry the SDK throws an AggregateError of every
      // attempt's error.
      const agg = await expectError(() => c.createSender(queue).sendMessages({ body: "x" }));
      assert.equal(agg.errors?.length, 4, String(agg));
      const err = agg.errors.at(-1);
      assert.equal(err.code, "ServiceBusy", String(err));
      assert.equal(err.retryable, true);
      assert.match(err.message, /Please wait 2 seconds/);
      await api("DELETE", "/$faults");
    } finally {
      await c.close();
    }
  });

  test("lock-lost on complete: MessageLockLost, and the message comes back", async () => {
    const queue = await createQueue(broker);
    const c = client();
    try {
      await c.createSender(queue).sendMessages({ body: "again" });
      await api("POST", "/$faults", { kind: "lock-lost", entity: queue });
      const r = c.createReceiver(queue);
      const [m] = await r.receiveMessages(1, { maxWaitTimeInMs: 5000 });
      const err = await expectError(() => r.completeMessage(m));
      assert.equal(err.code, "MessageLockLost", String(err));
      const [m2] = await r.receiveMessages(1, { maxWaitTimeInMs: 5000 });
      assert.equal(m2?.body, "again");
      assert.ok(m2.deliveryCount > m.deliveryCount, `delivery count ${m2.deliveryCount} after ${m.deliveryCount}`);
      await r.completeMessage(m2);
    } finally {
      await c.close();
    }
  });

  test("a dropped management answer: the SDK times out and retries", async () => {
    const queue = await createQueue(broker);
    const c = client();
    try {
      await c.createSender(queue).sendMessages({ body: "peeked" });
      await api("POST", "/$faults", { kind: "drop-frame", entity: queue, op: "management" });
      const t0 = Date.now();
      const peeked = await c.createReceiver(queue).peekMessages(1);
      assert.equal(peeked[0]?.body, "peeked");
      assert.ok(Date.now() - t0 >= 2500, `answered after ${Date.now() - t0} ms: the first attempt was not dropped`);
      assert.equal(await injected("drop-frame"), 1);
    } finally {
      await c.close();
    }
  });
});
