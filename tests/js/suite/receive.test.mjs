// Receiving from a queue with @azure/service-bus: receiveMessages in both
// modes with several batch sizes and wait times (the SDK drains the link
// at the end of every call and closes it if the broker does not answer the
// drain), many messages at once, and subscribe() streaming.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { startBroker } from "../lib/broker.mjs";
import { bodies, captureSdkWarnings, createQueue, drainTimeouts, newClient, receiveAll, sleep } from "../lib/sb.mjs";

const range = (n, prefix = "m") => Array.from({ length: n }, (_, i) => `${prefix}${String(i).padStart(4, "0")}`);

/** The rhea link under a receiver's receiveMessages (SDK internals, read only). */
const linkOf = (receiver) => receiver._batchingReceiver?.link;

describe("receive from a queue", () => {
  let broker, client, warnings;

  before(async () => {
    warnings = captureSdkWarnings();
    broker = await startBroker();
    client = newClient(broker);
  });
  after(async () => {
    await client?.close();
    await broker?.stop();
  });

  for (const receiveMode of ["peekLock", "receiveAndDelete"]) {
    test(`receiveMessages in ${receiveMode}: batch sizes and wait times on one link, drained every time`, async () => {
      const q = await createQueue(broker);
      const sender = client.createSender(q);
      const receiver = client.createReceiver(q, { receiveMode });
      const before = drainTimeouts(warnings).length;
      // available: messages in the queue when the call starts.
      const cases = [
        { count: 1, waitMs: 200, available: 1 },
        { count: 5, waitMs: 400, available: 3 },
        { count: 10, waitMs: 300, available: 10 },
        { count: 10, waitMs: 300, available: 25 }, // leaves 15
        { count: 50, waitMs: 1000, available: 15 },
        { count: 3, waitMs: 250, available: 0 },
        { count: 1, waitMs: 1, available: 0 },
        { count: 100, waitMs: 2000, available: 100 },
        { count: 20, waitMs: 600, available: 7 },
      ];
      let link;
      let queued = 0;
      let n = 0;
      for (const c of cases) {
        const toSend = c.available - queued;
        if (toSend > 0) {
          await sender.sendMessages(range(toSend, `b${n++}-`).map((body) => ({ body })));
        }
        const t0 = Date.now();
        const got = await receiver.receiveMessages(c.count, { maxWaitTimeInMs: c.waitMs });
        const elapsed = Date.now() - t0;
        const want = Math.min(c.count, c.available);
        assert.equal(got.length, want, `receiveMessages(${c.count}, ${c.waitMs} ms) with ${c.available} available`);
        queued = c.available - want;
        if (receiveMode === "peekLock") {
          for (const m of got) {
            assert.ok(m.lockToken, "peek-lock message has a lock token");
            await receiver.completeMessage(m);
          }
        } else {
          for (const m of got) assert.equal(m.lockToken, undefined);
        }
        // The drain at the end must be answered: the SDK waits at most
        // max(200 ms, time left), then logs a warning and closes the link.
        const l = linkOf(receiver);
        assert.ok(l && l.isOpen(), "the receiver link is still open");
        if (link) assert.equal(l, link, "the same link serves every call");
        link = l;
        assert.ok(elapsed < c.waitMs + 3000, `receiveMessages returned after ${elapsed} ms`);
      }
      assert.deepEqual(drainTimeouts(warnings).slice(before), [], "no drain timed out");
      const left = await receiver.peekMessages(10);
      assert.equal(left.length, 0, "every message was received once");
      await receiver.close();
      await sender.close();
    });
  }

  test("an empty queue: receiveMessages returns nothing after the wait, and the drain is answered at once", async () => {
    const q = await createQueue(broker);
    const receiver = client.createReceiver(q);
    const before = drainTimeouts(warnings).length;
    for (const waitMs of [50, 300, 1000]) {
      const t0 = Date.now();
      const got = await receiver.receiveMessages(10, { maxWaitTimeInMs: waitMs });
      const elapsed = Date.now() - t0;
      assert.equal(got.length, 0);
      assert.ok(elapsed >= waitMs - 5 && elapsed < waitMs + 1000, `waited ${elapsed} ms for ${waitMs}`);
    }
    // The wait is over when the drain starts; the SDK then gives the
    // broker 200 ms to answer it and logs this warning (and closes the
    // link) when it does not.
    assert.deepEqual(drainTimeouts(warnings).slice(before), []);
    assert.ok(linkOf(receiver).isOpen());
    await receiver.close();
  });

  test("a message sent while receiveMessages waits is delivered at once", async () => {
    const q = await createQueue(broker);
    const receiver = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const sender = client.createSender(q);
    await receiver.receiveMessages(1, { maxWaitTimeInMs: 50 }); // opens the link
    const t0 = Date.now();
    const pending = receiver.receiveMessages(1, { maxWaitTimeInMs: 10000 });
    await sleep(300);
    await sender.sendMessages({ body: "late" });
    const got = await pending;
    assert.deepEqual(bodies(got), ["late"]);
    assert.ok(Date.now() - t0 < 3000, "delivered while waiting, not after the wait");
    await receiver.close();
    await sender.close();
  });

  test("closing a receiver while it waits leaves later messages to the next receiver at once", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    const first = client.createReceiver(q);
    const pending = first.receiveMessages(10, { maxWaitTimeInMs: 5000 });
    await sleep(300);
    await first.close();
    const early = await pending;
    assert.equal(early.length, 0);
    await sender.sendMessages([{ body: "x" }, { body: "y" }]);
    const second = client.createReceiver(q);
    const t0 = Date.now();
    const got = await receiveAll(second, 2, { waitMs: 3000 });
    assert.deepEqual(bodies(got), ["x", "y"]);
    assert.ok(Date.now() - t0 < 2500, "not held by the closed link");
    for (const m of got) await second.completeMessage(m);
    await second.close();
    await sender.close();
  });

  test("250 messages through one receiver in peek-lock, in order", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    const all = range(250);
    for (let i = 0; i < all.length; i += 50) {
      const batch = await sender.createMessageBatch();
      for (const body of all.slice(i, i + 50)) assert.ok(batch.tryAddMessage({ body }));
      await sender.sendMessages(batch);
    }
    const receiver = client.createReceiver(q);
    const before = drainTimeouts(warnings).length;
    const got = await receiveAll(receiver, 250, { batch: 250, waitMs: 3000 });
    assert.deepEqual(bodies(got), all);
    await Promise.all(got.map((m) => receiver.completeMessage(m)));
    assert.deepEqual(drainTimeouts(warnings).slice(before), []);
    assert.equal((await receiver.peekMessages(1)).length, 0);
    await receiver.close();
    await sender.close();
  });

  test("250 messages in receive-and-delete with a single receiveMessages call", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    const all = range(250);
    await sender.sendMessages(all.map((body) => ({ body })));
    const receiver = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const got = await receiver.receiveMessages(250, { maxWaitTimeInMs: 5000 });
    assert.deepEqual(bodies(got), all);
    await receiver.close();
    await sender.close();
  });

  test("getMessageIterator yields messages as they come", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    await sender.sendMessages(range(15).map((body) => ({ body })));
    const receiver = client.createReceiver(q);
    const before = drainTimeouts(warnings).length;
    const got = [];
    for await (const m of receiver.getMessageIterator()) {
      got.push(m.body);
      await receiver.completeMessage(m);
      if (got.length === 15) break;
    }
    assert.deepEqual(got, range(15));
    assert.deepEqual(drainTimeouts(warnings).slice(before), []);
    await receiver.close();
    await sender.close();
  });

  test("competing receivers on one queue share the messages without duplicates", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    const all = range(120);
    await sender.sendMessages(all.map((body) => ({ body })));
    const otherClient = newClient(broker); // a second connection
    const receivers = [client.createReceiver(q), client.createReceiver(q), otherClient.createReceiver(q)];
    const seen = [];
    await Promise.all(
      receivers.map(async (r) => {
        for (;;) {
          const got = await r.receiveMessages(7, { maxWaitTimeInMs: 500 });
          if (got.length === 0) return;
          for (const m of got) {
            seen.push(m.body);
            await r.completeMessage(m);
          }
        }
      }),
    );
    assert.deepEqual(seen.slice().sort(), all);
    for (const r of receivers) await r.close();
    await otherClient.close();
    await sender.close();
  });

  test("subscribe() streams messages sent before and after it started, with manual settlement", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    const receiver = client.createReceiver(q);
    const before = drainTimeouts(warnings).length;
    const early = range(30, "early");
    const late = range(30, "late");
    await sender.sendMessages(early.map((body) => ({ body })));
    const received = [];
    let subscription;
    const done = new Promise((resolve, reject) => {
      subscription = receiver.subscribe(
        {
          processMessage: async (m) => {
            received.push(m.body);
            await receiver.completeMessage(m);
            if (received.length === early.length + late.length) resolve();
          },
          processError: async ({ error }) => reject(error),
        },
        { autoCompleteMessages: false, maxConcurrentCalls: 5 },
      );
    });
    await sleep(200);
    for (const body of late) await sender.sendMessages({ body });
    await done;
    await subscription.close();
    assert.deepEqual(received.slice().sort(), [...early, ...late].sort());
    assert.deepEqual(drainTimeouts(warnings).slice(before), []);
    assert.equal((await receiver.peekMessages(1)).length, 0, "every message was completed");
    await receiver.close();
    await sender.close();
  });

  test("subscribe() with autoCompleteMessages completes each message after its handler", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    await sender.sendMessages(range(20).map((body) => ({ body })));
    const receiver = client.createReceiver(q);
    const received = [];
    let subscription;
    await new Promise((resolve, reject) => {
      subscription = receiver.subscribe(
        {
          processMessage: async (m) => {
            received.push(m.body);
            if (received.length === 20) resolve();
          },
          processError: async ({ error }) => reject(error),
        },
        { autoCompleteMessages: true, maxConcurrentCalls: 1 },
      );
    });
    await subscription.close();
    await receiver.close();
    assert.deepEqual(received, range(20));
    // Auto-complete happens after the handler returns: allow it to land.
    const check = client.createReceiver(q);
    for (let i = 0; i < 20 && (await check.peekMessages(1)).length > 0; i++) await sleep(100);
    assert.equal((await check.peekMessages(1)).length, 0, "every message was auto-completed");
    await check.close();
    await sender.close();
  });

  test("subscribe() in receive-and-delete mode", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    await sender.sendMessages(range(10).map((body) => ({ body })));
    const receiver = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const received = [];
    let subscription;
    await new Promise((resolve, reject) => {
      subscription = receiver.subscribe({
        processMessage: async (m) => {
          received.push(m.body);
          if (received.length === 10) resolve();
        },
        processError: async ({ error }) => reject(error),
      });
    });
    await subscription.close();
    assert.deepEqual(received, range(10));
    assert.equal((await receiver.peekMessages(1)).length, 0);
    await receiver.close();
    await sender.close();
  });
});
