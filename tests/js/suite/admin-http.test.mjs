// ServiceBusAdministrationClient of @azure/service-bus 7.10.0-beta.2 in
// emulator mode (UseDevelopmentEmulator=true: plain HTTP) on the broker's
// --http port: queue CRUD, listing with paging, runtime properties.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { startBroker } from "../lib/broker.mjs";
import { adminClient, expectError, newClient, sbBeta, uniqueName } from "../lib/sb.mjs";

describe("administration client over HTTP (7.10.0-beta.2, emulator mode)", () => {
  let broker, admin;

  before(async () => {
    broker = await startBroker();
    admin = adminClient(broker);
  });
  after(async () => {
    await broker?.stop();
  });

  test("getNamespaceProperties", async () => {
    const ns = await admin.getNamespaceProperties();
    assert.equal(typeof ns.name, "string");
    assert.ok(ns.name.length > 0);
    assert.equal(ns.messagingSku, "Standard");
    assert.ok(ns.createdAt instanceof Date);
  });

  test("createQueue with options, getQueue, queueExists, updateQueue, deleteQueue", async () => {
    const name = uniqueName("crud");
    assert.equal(await admin.queueExists(name), false);
    const created = await admin.createQueue(name, {
      lockDuration: "PT45S",
      maxDeliveryCount: 7,
      defaultMessageTimeToLive: "P2D",
      deadLetteringOnMessageExpiration: true,
      requiresDuplicateDetection: true,
      duplicateDetectionHistoryTimeWindow: "PT20M",
      maxSizeInMegabytes: 2048,
      userMetadata: "made by the JS conformance test",
    });
    assert.equal(created.name, name);
    assert.equal(created.lockDuration, "PT45S");
    assert.equal(created.maxDeliveryCount, 7);
    assert.equal(created.defaultMessageTimeToLive, "P2D");
    assert.equal(created.deadLetteringOnMessageExpiration, true);
    assert.equal(created.requiresDuplicateDetection, true);
    assert.equal(created.duplicateDetectionHistoryTimeWindow, "PT20M");
    assert.equal(created.maxSizeInMegabytes, 2048);
    assert.equal(created.userMetadata, "made by the JS conformance test");
    assert.equal(created.requiresSession, false);
    assert.equal(created.status, "Active");
    assert.equal(await admin.queueExists(name), true);

    const got = await admin.getQueue(name);
    assert.equal(got.name, name);
    assert.equal(got.lockDuration, "PT45S");
    assert.equal(got.maxDeliveryCount, 7);

    got.maxDeliveryCount = 3;
    got.lockDuration = "PT1M";
    got.userMetadata = "updated";
    const updated = await admin.updateQueue(got);
    assert.equal(updated.maxDeliveryCount, 3);
    assert.equal(updated.lockDuration, "PT1M");
    assert.equal(updated.userMetadata, "updated");
    const again = await admin.getQueue(name);
    assert.equal(again.maxDeliveryCount, 3);
    assert.equal(again.requiresDuplicateDetection, true, "unchanged properties are kept");

    // The new settings are in force for the AMQP side.
    const client = newClient(broker);
    try {
      await client.createSender(name).sendMessages({ body: "x" });
      const receiver = client.createReceiver(name);
      const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 3000 });
      const lock = m.lockedUntilUtc.getTime() - Date.now();
      assert.ok(lock > 50000 && lock <= 61000, `lock of ${lock} ms for LockDuration PT1M`);
      await receiver.completeMessage(m);
    } finally {
      await client.close();
    }

    await admin.deleteQueue(name);
    assert.equal(await admin.queueExists(name), false);
  });

  test("errors: create twice, get, update or delete a missing queue, invalid properties", async () => {
    const name = uniqueName("err");
    await admin.createQueue(name);
    const dup = await expectError(() => admin.createQueue(name));
    assert.equal(dup.statusCode, 409);
    assert.equal(dup.code, "MessageEntityAlreadyExistsError", String(dup));

    const missing = uniqueName("missing");
    const get = await expectError(() => admin.getQueue(missing));
    assert.equal(get.statusCode, 404);
    assert.equal(get.code, "MessageEntityNotFoundError", String(get));
    const del = await expectError(() => admin.deleteQueue(missing));
    assert.equal(del.statusCode, 404);
    const props = await admin.getQueue(name);
    props.name = missing;
    const upd = await expectError(() => admin.updateQueue(props));
    assert.equal(upd.statusCode, 404, String(upd));

    const bad = await expectError(() => admin.createQueue(uniqueName("bad"), { lockDuration: "PT1H" }));
    assert.equal(bad.statusCode, 400, String(bad));
    await admin.deleteQueue(name);
  });

  test("listQueues and listQueuesRuntimeProperties page through many queues", async () => {
    const prefix = uniqueName("list");
    const names = [];
    for (let i = 0; i < 23; i++) names.push(`${prefix}-${String(i).padStart(2, "0")}`);
    for (const n of names) await admin.createQueue(n);

    const all = [];
    for await (const q of admin.listQueues()) all.push(q.name);
    for (const n of names) assert.ok(all.includes(n), `listQueues lists ${n}`);
    assert.equal(new Set(all).size, all.length, "no queue listed twice");

    const pages = [];
    for await (const page of admin.listQueues().byPage({ maxPageSize: 5 })) {
      assert.ok(page.length <= 5, `page of ${page.length}`);
      pages.push(page.map((q) => q.name));
    }
    assert.deepEqual(pages.flat(), all, "paging gives the same list in the same order");
    assert.ok(pages.length >= Math.ceil(all.length / 5));

    const rt = [];
    for await (const page of admin.listQueuesRuntimeProperties().byPage({ maxPageSize: 7 })) {
      assert.ok(page.length <= 7);
      rt.push(...page.map((q) => q.name));
    }
    assert.deepEqual(rt, all);

    // Continue from a continuation token.
    const it = admin.listQueues().byPage({ maxPageSize: 10 });
    const first = (await it.next()).value;
    const token = first.continuationToken;
    assert.ok(token, "a continuation token while queues remain");
    const rest = [];
    for await (const page of admin.listQueues().byPage({ maxPageSize: 10, continuationToken: token })) {
      rest.push(...page.map((q) => q.name));
    }
    assert.deepEqual([...first.map((q) => q.name), ...rest], all);

    for (const n of names) await admin.deleteQueue(n);
  });

  test("getQueueRuntimeProperties counts active, scheduled, dead-lettered and locked messages", async () => {
    const name = uniqueName("rt");
    await admin.createQueue(name);
    const client = newClient(broker);
    try {
      const sender = client.createSender(name);
      await sender.sendMessages([{ body: "a" }, { body: "b" }, { body: "c" }, { body: "d" }]);
      await sender.scheduleMessages({ body: "s" }, new Date(Date.now() + 3600 * 1000));
      const receiver = client.createReceiver(name);
      const got = await receiver.receiveMessages(2, { maxWaitTimeInMs: 3000 });
      assert.equal(got.length, 2);
      await receiver.deadLetterMessage(got[0], { deadLetterReason: "test" });

      const rt = await admin.getQueueRuntimeProperties(name);
      assert.equal(rt.name, name);
      assert.equal(rt.activeMessageCount, 3, "b is locked but active; c and d wait");
      assert.equal(rt.scheduledMessageCount, 1);
      assert.equal(rt.deadLetterMessageCount, 1);
      assert.equal(rt.transferMessageCount, 0);
      assert.equal(rt.transferDeadLetterMessageCount, 0);
      assert.equal(rt.totalMessageCount, 5);
      assert.ok(rt.sizeInBytes > 0);
      assert.ok(rt.createdAt instanceof Date && rt.modifiedAt instanceof Date && rt.accessedAt instanceof Date);

      await receiver.completeMessage(got[1]);
      const after = await admin.getQueueRuntimeProperties(name);
      assert.equal(after.activeMessageCount, 2);
      assert.equal(after.totalMessageCount, 4);
    } finally {
      await client.close();
    }
    const missing = await expectError(() => admin.getQueueRuntimeProperties(uniqueName("missing")));
    assert.equal(missing.statusCode, 404);
    await admin.deleteQueue(name);
  });

  test("a wrong key is refused with 401", async () => {
    const bad = new sbBeta.ServiceBusAdministrationClient(broker.httpAdminConnectionString({ key: "not-the-key" }));
    const err = await expectError(() => bad.getNamespaceProperties());
    assert.equal(err.statusCode, 401, String(err));
    const err2 = await expectError(() => bad.createQueue(uniqueName("unauth")));
    assert.equal(err2.statusCode, 401, String(err2));
  });
});
