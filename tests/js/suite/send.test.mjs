// Sending to a queue with @azure/service-bus: single messages with every
// property, batches from createMessageBatch, scheduled messages and their
// cancellation, a message near the size limit and one over it, and a 10 MB
// message on a queue allowed more.

import assert from "node:assert/strict";
import crypto from "node:crypto";
import { after, before, describe, test } from "node:test";

import { startBroker } from "../lib/broker.mjs";
import { bodies, createQueue, expectError, newClient, receiveAll, seq, sleep } from "../lib/sb.mjs";

describe("send to a queue", () => {
  let broker, client;

  before(async () => {
    broker = await startBroker();
    client = newClient(broker);
  });
  after(async () => {
    await client?.close();
    await broker?.stop();
  });

  test("a single message keeps its body, properties and application properties", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    const receiver = client.createReceiver(q);
    const before = Date.now();
    await sender.sendMessages({
      body: { order: 42, items: ["a", "b"] },
      messageId: "mid-1",
      correlationId: "cid-1",
      subject: "subject-1",
      contentType: "application/json",
      to: "to-1",
      replyTo: "reply-1",
      timeToLive: 3600 * 1000,
      applicationProperties: { str: "s", int: 7, float: 1.5, bool: true, when: new Date("2024-01-02T03:04:05.678Z") },
    });
    const [m] = await receiveAll(receiver, 1);
    assert.deepEqual(m.body, { order: 42, items: ["a", "b"] });
    assert.equal(m.messageId, "mid-1");
    assert.equal(m.correlationId, "cid-1");
    assert.equal(m.subject, "subject-1");
    assert.equal(m.contentType, "application/json");
    assert.equal(m.to, "to-1");
    assert.equal(m.replyTo, "reply-1");
    assert.equal(m.timeToLive, 3600 * 1000);
    assert.equal(m.applicationProperties.str, "s");
    assert.equal(m.applicationProperties.int, 7);
    assert.equal(m.applicationProperties.float, 1.5);
    assert.equal(m.applicationProperties.bool, true);
    // A timestamp travels as an AMQP timestamp; the SDK hands it back as
    // milliseconds unless skipConvertingDate is set.
    assert.equal(m.applicationProperties.when, Date.parse("2024-01-02T03:04:05.678Z"));
    // Broker-assigned fields.
    assert.equal(m.deliveryCount, 0, "the JS SDK shows the wire delivery count: 0 on first delivery");
    assert.ok(seq(m.sequenceNumber) >= 1);
    assert.ok(m.enqueuedTimeUtc instanceof Date && m.enqueuedTimeUtc.getTime() >= before - 1000);
    assert.ok(m.lockedUntilUtc instanceof Date && m.lockedUntilUtc.getTime() > Date.now());
    assert.equal(m.expiresAtUtc.getTime(), m.enqueuedTimeUtc.getTime() + 3600 * 1000);
    assert.equal(m.state, "active");
    assert.match(m.lockToken, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    await receiver.completeMessage(m);
    await receiver.close();
    await sender.close();
  });

  test("message bodies of every kind, and a message without a messageId gets one", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    const receiver = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const sent = ["text", 12.5, true, null, [1, 2, 3], { nested: { deep: true } }, Buffer.from([0, 1, 2, 255])];
    for (const body of sent) await sender.sendMessages({ body });
    const got = await receiveAll(receiver, sent.length);
    assert.deepEqual(bodies(got), sent);
    for (const m of got) {
      // Service Bus gives a message sent without an id one of its own;
      // the SDK's lock renewal needs it.
      assert.equal(typeof m.messageId, "string");
      assert.ok(m.messageId.length > 0);
    }
    assert.equal(new Set(got.map((m) => m.messageId)).size, sent.length, "assigned ids are unique");
    await receiver.close();
    await sender.close();
  });

  test("AMQP messages with value and sequence bodies, and ids of every type, come back unchanged", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    await sender.sendMessages({
      body: { answer: 42, list: [1, "two"] },
      bodyType: "value",
      // rhea sends a number id as ulong and a Buffer id as uuid (16 bytes).
      properties: { messageId: 12345, correlationId: Buffer.from("00112233445566778899aabbccddeeff", "hex") },
      applicationProperties: { kind: "value" },
      messageAnnotations: { "x-opt-custom": "annotation" },
    });
    await sender.sendMessages({
      body: [
        [1, 2],
        ["a", "b"],
      ],
      bodyType: "sequence",
      properties: { messageId: "seq-id" },
    });
    await sender.sendMessages({ body: Buffer.from("raw bytes"), bodyType: "data", properties: { messageId: "data-id" } });
    const receiver = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const [v, sq, d] = await receiveAll(receiver, 3);
    assert.equal(v._rawAmqpMessage.bodyType, "value");
    assert.deepEqual(v.body, { answer: 42, list: [1, "two"] });
    assert.equal(v.messageId, 12345);
    assert.equal(Buffer.from(v.correlationId).toString("hex"), "00112233445566778899aabbccddeeff");
    assert.equal(v.applicationProperties.kind, "value");
    assert.equal(v._rawAmqpMessage.messageAnnotations["x-opt-custom"], "annotation");
    assert.equal(sq._rawAmqpMessage.bodyType, "sequence");
    assert.deepEqual(sq.body, [
      [1, 2],
      ["a", "b"],
    ]);
    assert.equal(sq.messageId, "seq-id");
    assert.equal(d._rawAmqpMessage.bodyType, "data");
    assert.equal(Buffer.from(d.body).toString(), "raw bytes");
    await receiver.close();
    await sender.close();
  });

  test("sessionId-free routing fields and partitionKey survive", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    await sender.sendMessages({ body: "p", partitionKey: "pk-1", replyToSessionId: "rts-1" });
    const receiver = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const [m] = await receiveAll(receiver, 1);
    assert.equal(m.partitionKey, "pk-1");
    assert.equal(m.replyToSessionId, "rts-1");
    await receiver.close();
    await sender.close();
  });

  test("duplicate detection drops a second message with the same messageId", async () => {
    const q = await createQueue(broker, { requiresDuplicateDetection: true, duplicateDetectionHistoryTimeWindow: "PT10M" });
    const sender = client.createSender(q);
    await sender.sendMessages({ body: "first", messageId: "same" });
    await sender.sendMessages({ body: "second", messageId: "same" });
    await sender.sendMessages({ body: "other", messageId: "other" });
    const batch = await sender.createMessageBatch();
    batch.tryAddMessage({ body: "third", messageId: "same" });
    batch.tryAddMessage({ body: "fourth", messageId: "new" });
    await sender.sendMessages(batch);
    const receiver = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const got = await receiver.receiveMessages(10, { maxWaitTimeInMs: 1000 });
    assert.deepEqual(bodies(got), ["first", "other", "fourth"]);
    await receiver.close();
    await sender.close();
  });

  test("an array of messages and a batch from createMessageBatch arrive in order", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    await sender.sendMessages([{ body: "a0" }, { body: "a1" }, { body: "a2" }]);
    const batch = await sender.createMessageBatch();
    assert.equal(batch.maxSizeInBytes, 256 * 1024, "the batch limit is the link's max-message-size");
    for (let i = 0; i < 40; i++) {
      assert.ok(batch.tryAddMessage({ body: `b${i}`, messageId: `id-b${i}`, applicationProperties: { i } }));
    }
    assert.equal(batch.count, 40);
    await sender.sendMessages(batch);
    const receiver = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const got = await receiveAll(receiver, 43);
    assert.deepEqual(bodies(got), ["a0", "a1", "a2", ...Array.from({ length: 40 }, (_, i) => `b${i}`)]);
    for (let i = 0; i < 40; i++) {
      // Each message of the batch keeps its own properties.
      assert.equal(got[3 + i].messageId, `id-b${i}`);
      assert.equal(got[3 + i].applicationProperties.i, i);
    }
    const seqs = got.map((m) => seq(m.sequenceNumber));
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b));
    await receiver.close();
    await sender.close();
  });

  test("a batch fills up to the size limit and is sent whole", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    const batch = await sender.createMessageBatch();
    const body = Buffer.alloc(10 * 1024, 7);
    let n = 0;
    while (batch.tryAddMessage({ body })) n++;
    assert.ok(n >= 20 && n < 26, `${n} messages of 10 KiB fit a 256 KiB batch`);
    await sender.sendMessages(batch);
    const receiver = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const got = await receiveAll(receiver, n);
    for (const m of got) assert.ok(Buffer.from(m.body).equals(body));
    await receiver.close();
    await sender.close();
  });

  test("scheduleMessages holds messages until their time; cancelScheduledMessages removes them", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    const receiver = client.createReceiver(q);
    const soon = new Date(Date.now() + 2000);
    const later = new Date(Date.now() + 3600 * 1000);
    const [s1] = await sender.scheduleMessages({ body: "soon", messageId: "soon" }, soon);
    const [s2, s3] = await sender.scheduleMessages([{ body: "later-1" }, { body: "later-2" }], later);
    assert.ok(seq(s2) > seq(s1) && seq(s3) > seq(s2));

    // Scheduled messages can be peeked, with their state and time.
    const peeked = await receiver.peekMessages(10, { fromSequenceNumber: s1 });
    assert.deepEqual(bodies(peeked), ["soon", "later-1", "later-2"]);
    for (const m of peeked) assert.equal(m.state, "scheduled");
    assert.equal(peeked[0].scheduledEnqueueTimeUtc.getTime(), soon.getTime());
    assert.equal(peeked[1].scheduledEnqueueTimeUtc.getTime(), later.getTime());

    // Not receivable before their time.
    assert.equal((await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 })).length, 0);

    await sender.cancelScheduledMessages([s2, s3]);
    assert.deepEqual(bodies(await receiver.peekMessages(10, { fromSequenceNumber: s1 })), ["soon"]);

    // "soon" becomes active on time and is received with its sequence number.
    const got = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
    assert.deepEqual(bodies(got), ["soon"]);
    assert.ok(Date.now() >= soon.getTime() - 50, "not before its scheduled time");
    assert.equal(seq(got[0].sequenceNumber), seq(s1));
    assert.equal(got[0].scheduledEnqueueTimeUtc.getTime(), soon.getTime());
    await receiver.completeMessage(got[0]);

    // A message with scheduledEnqueueTimeUtc sent normally is scheduled too.
    await sender.sendMessages({ body: "via-send", scheduledEnqueueTimeUtc: new Date(Date.now() + 3600 * 1000) });
    const [p] = await receiver.peekMessages(1);
    assert.equal(p.body, "via-send");
    assert.equal(p.state, "scheduled");
    await sender.cancelScheduledMessages(p.sequenceNumber);
    assert.equal((await receiver.peekMessages(1)).length, 0);
    await receiver.close();
    await sender.close();
  });

  test("a near-limit message can be scheduled, peeked back and cancelled (frames of 64 KiB each way)", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    const receiver = client.createReceiver(q);
    const near = Buffer.alloc(256 * 1024 - 1024, 3);
    const [s1] = await sender.scheduleMessages({ body: near }, new Date(Date.now() + 3600 * 1000));
    const peeked = await receiver.peekMessages(10, { fromSequenceNumber: s1 });
    assert.equal(peeked.length, 1);
    assert.ok(Buffer.from(peeked[0].body).equals(near), "the peeked body is the scheduled one");
    await sender.cancelScheduledMessages([s1]);
    assert.equal((await receiver.peekMessages(10, { fromSequenceNumber: s1 })).length, 0);
    await receiver.close();
    await sender.close();
  });

  test("a message near the 256 KiB limit is accepted; one over it fails with MessageSizeExceeded", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    const near = Buffer.alloc(256 * 1024 - 1024, 1);
    await sender.sendMessages({ body: near });

    const over = Buffer.alloc(256 * 1024 + 1, 2);
    const t0 = Date.now();
    const err = await expectError(() => sender.sendMessages({ body: over }));
    assert.equal(err.code, "MessageSizeExceeded", String(err));
    assert.equal(err.retryable, false);
    assert.ok(Date.now() - t0 < 2000, "refused at once");

    // A batch refuses the oversized message on the client side.
    const batch = await sender.createMessageBatch();
    assert.equal(batch.tryAddMessage({ body: over }), false);

    // The link still works after the refusal.
    await sender.sendMessages({ body: "after" });
    const receiver = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const got = await receiveAll(receiver, 2);
    assert.ok(Buffer.from(got[0].body).equals(near));
    assert.equal(got[1].body, "after");
    await receiver.close();
    await sender.close();
  });

  test("a 10 MB message is sent, peeked, received and completed whole", async () => {
    // Over the broker's large-message threshold: spooled as it arrives,
    // stored in a file of its own, sent back a frame at a time.
    const q = await createQueue(broker, { maxMessageSizeInKilobytes: 11 * 1024 });
    const big = crypto.randomBytes(10 * 1024 * 1024);
    const sha = (b) => crypto.createHash("sha256").update(b).digest("hex");
    const want = sha(big);
    const sender = client.createSender(q);
    await sender.sendMessages({ body: big, applicationProperties: { sha256: want } });
    const receiver = client.createReceiver(q);
    const [peeked] = await receiver.peekMessages(1);
    assert.equal(sha(Buffer.from(peeked.body)), want, "the peeked body");
    const [m] = await receiveAll(receiver, 1, { waitMs: 10000, deadlineMs: 60000 });
    assert.equal(sha(Buffer.from(m.body)), want, "the received body");
    assert.equal(m.applicationProperties.sha256, want);
    await receiver.completeMessage(m);
    assert.equal((await receiver.peekMessages(1)).length, 0, "completed");
    await receiver.close();
    await sender.close();
  });

  test("a message whose time to live passes is not delivered", async () => {
    const q = await createQueue(broker);
    const sender = client.createSender(q);
    await sender.sendMessages([{ body: "short", timeToLive: 300 }, { body: "long" }]);
    await sleep(600);
    const receiver = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
    const got = await receiver.receiveMessages(5, { maxWaitTimeInMs: 500 });
    assert.deepEqual(bodies(got), ["long"]);
    await receiver.close();
    await sender.close();
  });
});
