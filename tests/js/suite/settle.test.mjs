// Settling queue messages with @azure/service-bus: complete, abandon with
// properties, dead-letter with reason and description (and receiving from
// the dead-letter queue), defer and receiveDeferredMessages, lock renewal
// and expiry, peeking from a sequence number, and the beta's batch delete.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { startBroker } from "../lib/broker.mjs";
import {
  bodies,
  createQueue,
  expectError,
  newClient,
  receiveAll,
  sbBeta,
  seq,
  sleep,
} from "../lib/sb.mjs";

describe("settle queue messages", () => {
  let broker, client;

  before(async () => {
    broker = await startBroker();
    client = newClient(broker);
  });
  after(async () => {
    await client?.close();
    await broker?.stop();
  });

  test("completeMessage removes the message", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    await sender.sendMessages([{ body: "a" }, { body: "b" }]);
    const receiver = client.createReceiver(q);
    const got = await receiveAll(receiver, 2);
    await receiver.completeMessage(got[0]);
    await receiver.completeMessage(got[1]);
    assert.equal((await receiver.peekMessages(5)).length, 0);
    await receiver.close();
    await sender.close();
  });

  test("abandonMessage with properties: redelivered with a higher delivery count and the new properties", async () => {
    const q = await createQueue(broker, { maxDeliveryCount: 3 });
    const sender = client.createSender(q);
    await sender.sendMessages({ body: "x", applicationProperties: { keep: "k", change: 1 } });
    const receiver = client.createReceiver(q);

    let [m] = await receiveAll(receiver, 1);
    assert.equal(m.deliveryCount, 0);
    await receiver.abandonMessage(m, { change: 2, added: "yes", flag: true, when: new Date(0) });

    [m] = await receiveAll(receiver, 1);
    assert.equal(m.body, "x");
    assert.equal(m.deliveryCount, 1);
    assert.equal(m.applicationProperties.keep, "k");
    assert.equal(m.applicationProperties.change, 2);
    assert.equal(m.applicationProperties.added, "yes");
    assert.equal(m.applicationProperties.flag, true);
    assert.equal(m.applicationProperties.when, 0);
    await receiver.abandonMessage(m);

    [m] = await receiveAll(receiver, 1);
    assert.equal(m.deliveryCount, 2);
    await receiver.abandonMessage(m);

    // The third abandon reached MaxDeliveryCount 3: dead-lettered.
    assert.equal((await receiver.receiveMessages(1, { maxWaitTimeInMs: 300 })).length, 0);
    const dlq = client.createReceiver(q, { subQueueType: "deadLetter" });
    const [d] = await receiveAll(dlq, 1);
    assert.equal(d.body, "x");
    assert.equal(d.deadLetterReason, "MaxDeliveryCountExceeded");
    assert.equal(typeof d.deadLetterErrorDescription, "string");
    await dlq.completeMessage(d);
    await dlq.close();
    await receiver.close();
    await sender.close();
  });

  test("deadLetterMessage with reason and description; the dead-letter queue receives it", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    await sender.sendMessages([
      { body: "dl-1", messageId: "m1" },
      { body: "dl-2", messageId: "m2" },
    ]);
    const receiver = client.createReceiver(q);
    const [m1, m2] = await receiveAll(receiver, 2);
    await receiver.deadLetterMessage(m1, {
      deadLetterReason: "BadOrder",
      deadLetterErrorDescription: "order 42 has no items",
      extra: "added",
    });
    await receiver.deadLetterMessage(m2);
    assert.equal((await receiver.peekMessages(5)).length, 0, "both left the queue");

    // Peek the dead-letter queue, then receive from it in both modes.
    const dlq = client.createReceiver(q, { subQueueType: "deadLetter" });
    const peeked = await dlq.peekMessages(5);
    assert.deepEqual(bodies(peeked), ["dl-1", "dl-2"]);
    const [d1, d2] = await receiveAll(dlq, 2);
    assert.equal(d1.messageId, "m1");
    assert.equal(d1.deadLetterReason, "BadOrder");
    assert.equal(d1.deadLetterErrorDescription, "order 42 has no items");
    assert.equal(d1.applicationProperties.extra, "added");
    assert.equal(seq(d1.sequenceNumber), seq(m1.sequenceNumber), "a message keeps its sequence number in the DLQ");
    assert.equal(d2.messageId, "m2");
    // An abandoned DLQ message comes back; complete removes it.
    await dlq.abandonMessage(d1);
    await dlq.completeMessage(d2);
    const dlqDelete = client.createReceiver(q, { subQueueType: "deadLetter", receiveMode: "receiveAndDelete" });
    const again = await receiveAll(dlqDelete, 1);
    assert.equal(again[0].messageId, "m1");
    assert.equal((await dlq.peekMessages(5)).length, 0);
    await dlqDelete.close();
    await dlq.close();
    await receiver.close();
    await sender.close();
  });

  test("deferMessage, then receiveDeferredMessages by sequence number, then complete", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    await sender.sendMessages([{ body: "d1" }, { body: "d2" }, { body: "d3" }, { body: "live" }]);
    const receiver = client.createReceiver(q);
    const got = await receiveAll(receiver, 4);
    const deferred = got.filter((m) => m.body !== "live");
    await receiver.deferMessage(deferred[0], { why: "later" });
    await receiver.deferMessage(deferred[1]);
    await receiver.deferMessage(deferred[2]);
    await receiver.completeMessage(got.find((m) => m.body === "live"));

    // Deferred messages are not received normally, only peeked.
    assert.equal((await receiver.receiveMessages(1, { maxWaitTimeInMs: 300 })).length, 0);
    const peeked = await receiver.peekMessages(5);
    assert.deepEqual(bodies(peeked), ["d1", "d2", "d3"]);
    for (const m of peeked) assert.equal(m.state, "deferred");

    const seqs = deferred.map((m) => m.sequenceNumber);
    const back = await receiver.receiveDeferredMessages(seqs.slice(0, 2));
    assert.deepEqual(bodies(back, true), ["d1", "d2"]);
    for (const m of back) {
      assert.equal(m.state, "deferred");
      assert.ok(m.lockToken, "a deferred message received in peek-lock has a lock token");
      assert.ok(m.lockedUntilUtc > new Date());
    }
    const d1 = back.find((m) => m.body === "d1");
    assert.equal(d1.applicationProperties.why, "later");
    // The lock of a message received by sequence number can be renewed.
    const was = d1.lockedUntilUtc.getTime();
    await sleep(20);
    const until = await receiver.renewMessageLock(d1);
    assert.ok(until.getTime() > was, "renewed");
    // Deferred messages are settled through $management.
    await receiver.completeMessage(d1);
    const d2 = back.find((m) => m.body === "d2");
    await receiver.abandonMessage(d2);
    // An abandoned deferred message stays deferred.
    const [d2again] = await receiver.receiveDeferredMessages(seqs[1]);
    assert.equal(d2again.body, "d2");
    await receiver.deadLetterMessage(d2again, { deadLetterReason: "r", deadLetterErrorDescription: "d" });

    // Receive-and-delete takes the last one out at once.
    const rad = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const [d3] = await rad.receiveDeferredMessages(seqs[2]);
    assert.equal(d3.body, "d3");
    assert.equal(d3.lockToken, undefined);
    assert.equal((await receiver.peekMessages(5)).length, 0);

    const dlq = client.createReceiver(q, { subQueueType: "deadLetter" });
    const [dl] = await dlq.peekMessages(1);
    assert.equal(dl.body, "d2");
    assert.equal(dl.deadLetterReason, "r");

    // A sequence number that is no longer deferred fails as in Service
    // Bus: "Failed to lock one or more specified messages...".
    const gone = await expectError(() => receiver.receiveDeferredMessages(seqs[0]));
    assert.equal(gone.code, "MessageNotFound", String(gone));
    await dlq.close();
    await rad.close();
    await receiver.close();
    await sender.close();
  });

  // 5 s is the shortest lock duration Service Bus allows.
  test("renewMessageLock extends the lock; an expired lock cannot settle and the message comes back", async () => {
    const q = await createQueue(broker, { lockDuration: "PT5S" });
    const sender = client.createSender(q);
    await sender.sendMessages([{ body: "renewed" }, { body: "expires" }]);
    const receiver = client.createReceiver(q, { maxAutoLockRenewalDurationInMs: 0 });
    const [renewed, expires] = await receiveAll(receiver, 2);
    const first = renewed.lockedUntilUtc.getTime();
    assert.ok(first > Date.now() + 3000 && first <= Date.now() + 5500, `locked until ${renewed.lockedUntilUtc.toISOString()}`);

    await sleep(3000);
    const until = await receiver.renewMessageLock(renewed);
    assert.ok(until.getTime() >= first + 2500, `renewed to ${until.toISOString()}, was ${new Date(first).toISOString()}`);
    assert.equal(renewed.lockedUntilUtc.getTime(), until.getTime(), "the SDK updates lockedUntilUtc");
    await sleep(first + 500 - Date.now());
    // Past the original lock, within the renewed one.
    await receiver.completeMessage(renewed);

    // "expires" was not renewed: its lock is gone.
    const err = await expectError(() => receiver.completeMessage(expires));
    assert.equal(err.code, "MessageLockLost", String(err));
    const err2 = await expectError(() => receiver.renewMessageLock(expires));
    assert.equal(err2.code, "MessageLockLost", String(err2));
    const [back] = await receiveAll(receiver, 1);
    assert.equal(back.body, "expires");
    assert.equal(back.deliveryCount, 1, "a lock expiry counts as a delivery");
    await receiver.completeMessage(back);
    await receiver.close();
    await sender.close();
  });

  test("auto lock renewal keeps a message locked past its lock duration", async () => {
    const q = await createQueue(broker, { lockDuration: "PT5S" });
    const sender = client.createSender(q);
    await sender.sendMessages({ body: "held" });
    const receiver = client.createReceiver(q, { maxAutoLockRenewalDurationInMs: 30000 });
    const [m] = await receiveAll(receiver, 1);
    const first = m.lockedUntilUtc.getTime();
    await sleep(first + 1000 - Date.now());
    assert.ok(m.lockedUntilUtc.getTime() > first, "the SDK renewed the lock");
    const other = client.createReceiver(q);
    assert.equal((await other.receiveMessages(1, { maxWaitTimeInMs: 300 })).length, 0, "still locked");
    await receiver.completeMessage(m);
    await other.close();
    await receiver.close();
    await sender.close();
  });

  test("peekMessages from a sequence number, and paging through with successive calls", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    await sender.sendMessages(Array.from({ length: 10 }, (_, i) => ({ body: `p${i}` })));
    const receiver = client.createReceiver(q);

    const all = await receiver.peekMessages(20);
    assert.deepEqual(bodies(all), Array.from({ length: 10 }, (_, i) => `p${i}`));
    for (const m of all) {
      assert.equal(m.lockToken, undefined, "peeked messages are not locked");
      assert.equal(m.state, "active");
    }
    const from = all[4].sequenceNumber;
    const some = await receiver.peekMessages(3, { fromSequenceNumber: from });
    assert.deepEqual(bodies(some), ["p4", "p5", "p6"]);
    assert.equal(seq(some[0].sequenceNumber), seq(from));

    // Without fromSequenceNumber, peeking continues where the last peek
    // stopped (the SDK keeps that per entity and connection: a new client).
    const otherClient = newClient(broker);
    const fresh = otherClient.createReceiver(q);
    const pages = [];
    for (;;) {
      const page = await fresh.peekMessages(4);
      if (page.length === 0) break;
      pages.push(bodies(page));
    }
    assert.deepEqual(pages, [
      ["p0", "p1", "p2", "p3"],
      ["p4", "p5", "p6", "p7"],
      ["p8", "p9"],
    ]);
    // Peeking does not lock: everything can still be received.
    const got = await receiveAll(receiver, 10);
    for (const m of got) await receiver.completeMessage(m);
    assert.deepEqual(await receiver.peekMessages(5, { fromSequenceNumber: from }), []);
    await otherClient.close();
    await receiver.close();
    await sender.close();
  });

  test("the beta's deleteMessages and purgeMessages remove unlocked messages", async () => {
    const q = await createQueue(broker);
    const betaClient = new sbBeta.ServiceBusClient(broker.connectionString(), {
      retryOptions: { maxRetries: 1, retryDelayInMs: 100, timeoutInMs: 20000 },
    });
    try {
      const sender = betaClient.createSender(q);
      await sender.sendMessages(Array.from({ length: 12 }, (_, i) => ({ body: `x${i}` })));
      const receiver = betaClient.createReceiver(q);
      const [locked] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2000 });
      assert.equal(locked.body, "x0");
      assert.equal(await receiver.deleteMessages({ maxMessageCount: 3 }), 3);
      assert.equal(await receiver.purgeMessages(), 8);
      assert.equal(await receiver.purgeMessages(), 0, "nothing left but the locked message");
      const left = await receiver.peekMessages(20);
      assert.deepEqual(bodies(left), ["x0"]);
      await receiver.completeMessage(locked);
      await receiver.close();
      await sender.close();
    } finally {
      await betaClient.close();
    }
  });
});
