// Errors @azure/service-bus users must see at once: an unknown entity is
// MessagingEntityNotFound, a wrong key is UnauthorizedAccess.
//
// The JS SDK (core-amqp) treats UnauthorizedAccess as retryable (keys may
// be rotated), with 3 retries 30 s apart by default; after the last one it
// throws an AggregateError of every attempt's error. The tests set small
// retryOptions so that they are fast, and check that the broker answers
// every attempt at once.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { startBroker } from "../lib/broker.mjs";
import { createQueue, expectError, sb } from "../lib/sb.mjs";

describe("errors", () => {
  let broker, queue;

  before(async () => {
    broker = await startBroker();
    queue = await createQueue(broker);
  });
  after(async () => {
    await broker?.stop();
  });

  /** clientWith returns a client whose operations are not retried. */
  const clientWith = (connection, maxRetries = 0) =>
    new sb.ServiceBusClient(broker.connectionString(connection), {
      retryOptions: { maxRetries, retryDelayInMs: 50, maxRetryDelayInMs: 50, timeoutInMs: 10000 },
    });

  /** timed runs fn and returns its error and how long it took. */
  async function timed(fn) {
    const t0 = Date.now();
    const err = await expectError(fn);
    return { err, ms: Date.now() - t0 };
  }

  test("an unknown queue: MessagingEntityNotFound for send, receive, peek and schedule", async () => {
    const client = clientWith();
    try {
      const name = "no-such-queue";
      const sender = client.createSender(name);
      const receiver = client.createReceiver(name);
      const ops = {
        send: () => sender.sendMessages({ body: "x" }),
        schedule: () => sender.scheduleMessages({ body: "x" }, new Date(Date.now() + 60000)),
        receive: () => receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 }),
        receiveAndDelete: () => client.createReceiver(name, { receiveMode: "receiveAndDelete" }).receiveMessages(1, { maxWaitTimeInMs: 5000 }),
        peek: () => receiver.peekMessages(1),
        deadLetterQueue: () => client.createReceiver(name, { subQueueType: "deadLetter" }).receiveMessages(1, { maxWaitTimeInMs: 5000 }),
      };
      for (const [op, fn] of Object.entries(ops)) {
        const { err, ms } = await timed(fn);
        assert.equal(err.code, "MessagingEntityNotFound", `${op}: ${err}`);
        assert.equal(err.retryable, false, op);
        assert.match(err.message, /could not be found/, op);
        assert.ok(ms < 2000, `${op} failed after ${ms} ms`);
      }
    } finally {
      await client.close();
    }
  });

  test("an unknown queue: subscribe() reports MessagingEntityNotFound to processError", async () => {
    const client = clientWith();
    try {
      const receiver = client.createReceiver("no-such-queue");
      const err = await new Promise((resolve) => {
        receiver.subscribe({
          processMessage: async () => {},
          processError: async ({ error }) => resolve(error),
        });
      });
      assert.equal(err.code, "MessagingEntityNotFound", String(err));
      await receiver.close();
    } finally {
      await client.close();
    }
  });

  for (const [what, connection] of [
    ["a wrong key", { key: "not-the-key" }],
    ["an unknown key name", { keyName: "NoSuchPolicy" }],
  ]) {
    test(`${what}: UnauthorizedAccess at once for send, receive and management operations`, async () => {
      const client = clientWith(connection);
      try {
        const sender = client.createSender(queue);
        const receiver = client.createReceiver(queue);
        const ops = {
          send: () => sender.sendMessages({ body: "x" }),
          schedule: () => sender.scheduleMessages({ body: "x" }, new Date(Date.now() + 60000)),
          receive: () => receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 }),
          peek: () => receiver.peekMessages(1),
        };
        for (const [op, fn] of Object.entries(ops)) {
          const { err, ms } = await timed(fn);
          assert.equal(err.code, "UnauthorizedAccess", `${op}: ${err}`);
          assert.ok(ms < 2000, `${op} failed after ${ms} ms`);
        }
      } finally {
        await client.close();
      }
    });
  }

  test("a wrong key with retries: every attempt is refused at once", async () => {
    const client = clientWith({ key: "not-the-key" }, 2);
    try {
      const { err, ms } = await timed(() => client.createSender(queue).sendMessages({ body: "x" }));
      // core-amqp's retry() throws an AggregateError after the last retry.
      const errors = err.errors ?? [err];
      assert.equal(errors.length, 3, String(err));
      for (const e of errors) assert.equal(e.code, "UnauthorizedAccess", String(e));
      assert.ok(ms < 3000, `three attempts took ${ms} ms`);
    } finally {
      await client.close();
    }
  });

  test("the right key still works on the same broker", async () => {
    const client = clientWith();
    try {
      await client.createSender(queue).sendMessages({ body: "ok" });
      const got = await client.createReceiver(queue, { receiveMode: "receiveAndDelete" }).receiveMessages(1, { maxWaitTimeInMs: 3000 });
      assert.equal(got[0]?.body, "ok");
    } finally {
      await client.close();
    }
  });
});
