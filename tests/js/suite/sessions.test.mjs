// Message sessions with @azure/service-bus: acceptSession and
// acceptNextSession (the plain-string session filter and its echo, the
// locked-until-utc property), order within a session, a locked session
// refused, session state, session lock renewal, peek and deferral within
// a session, the next-session wait timing out, and sessions on a
// subscription with a session-less message dead-lettered.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { startBroker } from "../lib/broker.mjs";
import { adminClient, bodies, createQueue, expectError, newClient, receiveAll, seq, sleep, uniqueName } from "../lib/sb.mjs";

describe("message sessions", () => {
  let broker, client;

  before(async () => {
    broker = await startBroker();
    client = newClient(broker);
  });
  after(async () => {
    await client?.close();
    await broker?.stop();
  });

  const sessionQueue = () => createQueue(broker, { requiresSession: true });

  test("acceptSession: the session's messages only, in order, locked until a future time", async () => {
    const q = await sessionQueue();
    const sender = client.createSender(q);
    await sender.sendMessages([
      { body: "a1", sessionId: "a" },
      { body: "b1", sessionId: "b" },
      { body: "a2", sessionId: "a" },
      { body: "a3", sessionId: "a" },
    ]);
    const receiver = await client.acceptSession(q, "a");
    assert.equal(receiver.sessionId, "a");
    assert.ok(receiver.sessionLockedUntilUtc instanceof Date);
    assert.ok(receiver.sessionLockedUntilUtc.getTime() > Date.now() + 30000, `locked until ${receiver.sessionLockedUntilUtc}`);
    const got = await receiveAll(receiver, 3);
    assert.deepEqual(bodies(got), ["a1", "a2", "a3"]);
    for (const m of got) {
      assert.equal(m.sessionId, "a");
      assert.equal(m.deliveryCount, 0);
    }
    // An abandoned message comes back first.
    await receiver.abandonMessage(got[0]);
    const [again] = await receiveAll(receiver, 1);
    assert.equal(again.body, "a1");
    assert.equal(again.deliveryCount, 1);
    for (const m of [again, got[1], got[2]]) await receiver.completeMessage(m);
    assert.equal((await receiver.receiveMessages(1, { maxWaitTimeInMs: 300 })).length, 0);
    await receiver.close();
    await sender.close();
  });

  test("acceptNextSession takes the oldest available session; a locked session cannot be accepted", async () => {
    const q = await sessionQueue();
    const sender = client.createSender(q);
    await sender.sendMessages([
      { body: "1", sessionId: "first" },
      { body: "2", sessionId: "second" },
    ]);
    const r1 = await client.acceptNextSession(q);
    assert.equal(r1.sessionId, "first");
    const err = await expectError(() => client.acceptSession(q, "first"));
    assert.equal(err.code, "SessionCannotBeLocked", `${err.code}: ${err.message}`);
    const r2 = await client.acceptNextSession(q);
    assert.equal(r2.sessionId, "second");
    assert.deepEqual(bodies(await receiveAll(r2, 1)), ["2"]);
    await r1.close();
    await r2.close();
    // Released by close: session "first" can be accepted again, its
    // message's delivery count unchanged.
    const r3 = await client.acceptSession(q, "first");
    const [m] = await receiveAll(r3, 1);
    assert.equal(m.deliveryCount, 0);
    await r3.completeMessage(m);
    await r3.close();
    await sender.close();
  });

  test("acceptNextSession with nothing available times out", async () => {
    const q = await sessionQueue();
    const quick = newClient(broker, { client: { retryOptions: { maxRetries: 0, timeoutInMs: 1500 } } });
    const start = Date.now();
    const err = await expectError(() => quick.acceptNextSession(q));
    assert.equal(err.code, "ServiceTimeout", `${err.code}: ${err.message}`);
    assert.ok(Date.now() - start < 10000);
    await quick.close();
  });

  test("session state: set, get, clear; renewSessionLock moves the lock", async () => {
    const q = await sessionQueue();
    const sender = client.createSender(q);
    await sender.sendMessages({ body: "x", sessionId: "s" });
    const receiver = await client.acceptSession(q, "s");
    // No state: the broker answers session-state null, which the SDK returns.
    assert.equal(await receiver.getSessionState(), null);
    await receiver.setSessionState({ step: 3, name: "checkout" });
    assert.deepEqual(await receiver.getSessionState(), { step: 3, name: "checkout" });
    await receiver.setSessionState("plain text");
    assert.equal(await receiver.getSessionState(), "plain text");
    // State larger than a 64 KiB frame, both ways.
    const big = "state-".repeat(Math.floor((100 * 1024) / 6));
    await receiver.setSessionState(big);
    assert.equal(await receiver.getSessionState(), big);

    const before = receiver.sessionLockedUntilUtc.getTime();
    await sleep(20);
    const until = await receiver.renewSessionLock();
    assert.ok(until instanceof Date);
    assert.ok(until.getTime() > before, `${until} not after ${new Date(before)}`);
    assert.equal(receiver.sessionLockedUntilUtc.getTime(), until.getTime());

    await receiver.setSessionState(null);
    assert.equal(await receiver.getSessionState(), null);
    await receiver.close();
    await sender.close();
  });

  test("peek and deferral within a session", async () => {
    const q = await sessionQueue();
    const sender = client.createSender(q);
    await sender.sendMessages([
      { body: "p1", sessionId: "p" },
      { body: "o1", sessionId: "other" },
      { body: "p2", sessionId: "p" },
    ]);
    const receiver = await client.acceptSession(q, "p");
    assert.deepEqual(bodies(await receiver.peekMessages(10)), ["p1", "p2"]);
    const [m] = await receiveAll(receiver, 1);
    await receiver.deferMessage(m);
    const [next] = await receiveAll(receiver, 1);
    assert.equal(next.body, "p2");
    await receiver.completeMessage(next);
    const [d] = await receiver.receiveDeferredMessages([m.sequenceNumber]);
    assert.equal(d.body, "p1");
    assert.equal(seq(d.sequenceNumber), seq(m.sequenceNumber));
    await receiver.completeMessage(d);
    await receiver.close();
    await sender.close();
  });

  test("a non-session receiver on a session queue is refused", async () => {
    const q = await sessionQueue();
    const receiver = client.createReceiver(q);
    const err = await expectError(() => receiver.receiveMessages(1, { maxWaitTimeInMs: 1000 }));
    assert.match(err.message, /It is not possible for an entity that requires sessions to create a non-sessionful message receiver/);
    await receiver.close();
  });

  test("a session subscription: sessions, and a session-less message dead-lettered", async () => {
    const admin = adminClient(broker);
    const topic = uniqueName("t");
    await admin.createTopic(topic);
    await admin.createSubscription(topic, "s", { requiresSession: true });
    const sender = client.createSender(topic);
    await sender.sendMessages([{ body: "x1", sessionId: "x" }, { body: "none" }, { body: "x2", sessionId: "x" }]);
    const receiver = await client.acceptNextSession(topic, "s");
    assert.equal(receiver.sessionId, "x");
    assert.deepEqual(bodies(await receiveAll(receiver, 2)), ["x1", "x2"]);
    await receiver.close();
    const dlq = client.createReceiver(topic, "s", { subQueueType: "deadLetter" });
    const [d] = await receiveAll(dlq, 1);
    assert.equal(d.body, "none");
    assert.equal(d.deadLetterReason, "Session id is null.");
    assert.equal(d.deadLetterErrorDescription, "Session enabled entity doesn't allow a message whose session identifier is null.");
    await dlq.completeMessage(d);
    await dlq.close();
    await sender.close();
  });
});
