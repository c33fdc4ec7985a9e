// Time control (busbar serve --test-clock, POST /$time/advance): a
// message's time to live and a scheduled message's time come when the
// test clock moves forward, without sleeping through them.

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { KEY, KEY_NAME, startBroker } from "../lib/broker.mjs";
import { createQueue, newClient, receiveAll } from "../lib/sb.mjs";

/** sasToken signs a token for audience as the SDKs do. */
function sasToken(audience) {
  const sr = encodeURIComponent(audience).toLowerCase();
  const se = Math.floor(Date.now() / 1000) + 3600;
  const sig = createHmac("sha256", KEY).update(`${sr}\n${se}`).digest("base64");
  return `SharedAccessSignature sr=${sr}&sig=${encodeURIComponent(sig)}&se=${se}&skn=${KEY_NAME}`;
}

describe("test clock", () => {
  let broker;

  before(async () => {
    broker = await startBroker({ extraArgs: ["--test-clock"] });
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
  const advance = (by) => api("POST", "/$time/advance", { by });
  const testNow = async () => new Date(Date.parse((await api("GET", "/$time")).now));

  test("a message whose time to live runs out is dead-lettered", async () => {
    const queue = await createQueue(broker, { deadLetteringOnMessageExpiration: true });
    const c = newClient(broker);
    try {
      await c.createSender(queue).sendMessages({ body: "short-lived", timeToLive: 3600_000 });
      const moved = await advance("2h");
      assert.equal(moved.offset, "2h0m0s");
      const dlq = c.createReceiver(queue, { subQueueType: "deadLetter" });
      const [m] = await receiveAll(dlq, 1);
      assert.equal(m.body, "short-lived");
      assert.equal(m.deadLetterReason, "TTLExpiredException");
      // The enqueued time is the test clock's: two hours behind it now.
      const behind = Date.parse(moved.now) - m.enqueuedTimeUtc.getTime();
      assert.ok(Math.abs(behind - 2 * 3600_000) < 5000, `enqueued ${m.enqueuedTimeUtc.toISOString()}, test time ${moved.now}`);
      await dlq.completeMessage(m);
    } finally {
      await c.close();
    }
  });

  test("a scheduled message appears when the test clock reaches its time", async () => {
    const queue = await createQueue(broker);
    const c = newClient(broker);
    try {
      const at = new Date((await testNow()).getTime() + 3600_000);
      await c.createSender(queue).scheduleMessages({ body: "later" }, at);
      const r = c.createReceiver(queue);
      assert.deepEqual(await r.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
      await advance("61m");
      const [m] = await receiveAll(r, 1);
      assert.equal(m.body, "later");
      assert.ok(Math.abs(m.enqueuedTimeUtc.getTime() - at.getTime()) < 5000, `enqueued ${m.enqueuedTimeUtc.toISOString()}, scheduled for ${at.toISOString()}`);
      await r.completeMessage(m);
    } finally {
      await c.close();
    }
  });

  test("the clock does not go back", async () => {
    const res = await fetch(`http://${broker.http}/$time/set`, {
      method: "POST",
      headers: { Authorization: sasToken(`sb://${broker.http}/`) },
      body: JSON.stringify({ to: "2001-01-01T00:00:00Z" }),
    });
    assert.equal(res.status, 400);
    assert.match(await res.text(), /only moves forward/);
  });
});
