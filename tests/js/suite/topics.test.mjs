// Topics, subscriptions and rules with @azure/service-bus: the beta's
// administration client over HTTP for topic, subscription and rule CRUD
// and runtime properties; sending to a topic and receiving from its
// subscriptions through SQL and correlation filters and SQL actions; the
// rule manager (over $management) with paging through many rules; a
// subscription's dead-letter queue.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { startBroker } from "../lib/broker.mjs";
import { adminClient, bodies, expectError, newClient, receiveAll, seq, uniqueName } from "../lib/sb.mjs";

/** all collects an async iterable. */
async function all(iterable) {
  const out = [];
  for await (const x of iterable) out.push(x);
  return out;
}

describe("topics and subscriptions", () => {
  let broker, admin, client;

  before(async () => {
    broker = await startBroker();
    admin = adminClient(broker);
    client = newClient(broker);
  });
  after(async () => {
    await client?.close();
    await broker?.stop();
  });

  test("administration: topic, subscription and rule CRUD, listing and runtime properties", async () => {
    const t = uniqueName("t");
    assert.equal(await admin.topicExists(t), false);
    const topic = await admin.createTopic(t, { defaultMessageTimeToLive: "PT1H", maxSizeInMegabytes: 2048 });
    assert.equal(topic.name, t);
    assert.equal(topic.defaultMessageTimeToLive, "PT1H");
    assert.equal(await admin.topicExists(t), true);
    topic.defaultMessageTimeToLive = "PT2H";
    assert.equal((await admin.updateTopic(topic)).defaultMessageTimeToLive, "PT2H");
    assert.ok((await all(admin.listTopics())).some((x) => x.name === t));
    const dupTopic = await expectError(() => admin.createTopic(t));
    assert.equal(dupTopic.code, "MessageEntityAlreadyExistsError", String(dupTopic));

    const sub = await admin.createSubscription(t, "s1", { maxDeliveryCount: 3, lockDuration: "PT30S" });
    assert.equal(sub.subscriptionName, "s1");
    assert.equal(sub.topicName, t);
    assert.equal(sub.maxDeliveryCount, 3);
    assert.equal(sub.lockDuration, "PT30S");
    await admin.createSubscription(t, "s2", { defaultRuleOptions: { name: "only-red", filter: { sqlExpression: "color = 'red'" } } });
    assert.equal(await admin.subscriptionExists(t, "s1"), true);
    sub.maxDeliveryCount = 5;
    assert.equal((await admin.updateSubscription(sub)).maxDeliveryCount, 5);
    assert.deepEqual((await all(admin.listSubscriptions(t))).map((s) => s.subscriptionName).sort(), ["s1", "s2"]);
    const pages = await all(admin.listSubscriptions(t).byPage({ maxPageSize: 1 }));
    assert.deepEqual(pages.map((p) => p.length), [1, 1]);
    const dupSub = await expectError(() => admin.createSubscription(t, "s1"));
    assert.equal(dupSub.code, "MessageEntityAlreadyExistsError", String(dupSub));

    // Rules.
    assert.deepEqual((await all(admin.listRules(t, "s2"))).map((r) => r.name), ["only-red"]);
    assert.deepEqual((await all(admin.listRules(t, "s1"))).map((r) => r.name), ["$Default"]);
    const rule = await admin.createRule(t, "s1", "big", { sqlExpression: "size > 10" }, { sqlExpression: "SET big = true" });
    assert.equal(rule.filter.sqlExpression, "size > 10");
    assert.equal(rule.action.sqlExpression, "SET big = true");
    await admin.createRule(t, "s1", "corr", { correlationId: "c1", applicationProperties: { k: "v" } });
    const corr = await admin.getRule(t, "s1", "corr");
    assert.equal(corr.filter.correlationId, "c1");
    assert.deepEqual(corr.filter.applicationProperties, { k: "v" });
    assert.equal(await admin.ruleExists(t, "s1", "corr"), true);
    rule.filter = { sqlExpression: "size > 20" };
    assert.equal((await admin.updateRule(t, "s1", rule)).filter.sqlExpression, "size > 20");
    await admin.deleteRule(t, "s1", "corr");
    assert.deepEqual((await all(admin.listRules(t, "s1"))).map((r) => r.name).sort(), ["$Default", "big"]);

    // Runtime properties.
    await client.createSender(t).sendMessages([{ body: 1, applicationProperties: { color: "red" } }, { body: 2 }]);
    const trt = await admin.getTopicRuntimeProperties(t);
    assert.equal(trt.name, t);
    assert.equal(trt.subscriptionCount, 2);
    const s1rt = await admin.getSubscriptionRuntimeProperties(t, "s1");
    const s2rt = await admin.getSubscriptionRuntimeProperties(t, "s2");
    assert.equal(s1rt.activeMessageCount, 2, "$Default takes both");
    assert.equal(s2rt.activeMessageCount, 1, "only the red one");
    assert.equal((await all(admin.listSubscriptionsRuntimeProperties(t))).length, 2);

    await admin.deleteSubscription(t, "s2");
    assert.equal(await admin.subscriptionExists(t, "s2"), false);
    await admin.deleteTopic(t);
    assert.equal(await admin.topicExists(t), false);
    const gone = await expectError(() => admin.getSubscription(t, "s1"));
    assert.equal(gone.statusCode, 404);
  });

  test("a message sent to a topic reaches each subscription whose filter matches", async () => {
    const t = uniqueName("t");
    await admin.createTopic(t);
    await admin.createSubscription(t, "all");
    await admin.createSubscription(t, "red", { defaultRuleOptions: { name: "red", filter: { sqlExpression: "color = 'red'" } } });
    await admin.createSubscription(t, "corr", {
      defaultRuleOptions: { name: "c", filter: { correlationId: "order-1", subject: "created", applicationProperties: { region: "eu" } } },
    });
    await admin.createSubscription(t, "none", { defaultRuleOptions: { name: "never", filter: { sqlExpression: "1 = 0" } } });
    await admin.createSubscription(t, "action", {
      defaultRuleOptions: { name: "tag", filter: { sqlExpression: "color = 'blue'" }, action: { sqlExpression: "SET seen = 'yes'; SET color = 'navy'" } },
    });

    const sender = client.createSender(t);
    await sender.sendMessages([
      { body: "red-1", applicationProperties: { color: "red" } },
      { body: "blue-1", applicationProperties: { color: "blue" } },
      { body: "order", correlationId: "order-1", subject: "created", applicationProperties: { region: "eu" } },
      { body: "order-us", correlationId: "order-1", subject: "created", applicationProperties: { region: "us" } },
    ]);
    const batch = await sender.createMessageBatch();
    batch.tryAddMessage({ body: "red-2", applicationProperties: { color: "red" } });
    batch.tryAddMessage({ body: "green", applicationProperties: { color: "green" } });
    await sender.sendMessages(batch);

    const take = async (sub, n) => {
      const r = client.createReceiver(t, sub, { receiveMode: "receiveAndDelete" });
      const got = n ? await receiveAll(r, n) : await r.receiveMessages(10, { maxWaitTimeInMs: 500 });
      const extra = await r.receiveMessages(10, { maxWaitTimeInMs: 200 });
      assert.equal(extra.length, 0, `${sub} got more than ${n}`);
      await r.close();
      return got;
    };
    assert.deepEqual(bodies(await take("all", 6)), ["red-1", "blue-1", "order", "order-us", "red-2", "green"]);
    assert.deepEqual(bodies(await take("red", 2)), ["red-1", "red-2"]);
    assert.deepEqual(bodies(await take("corr", 1)), ["order"]);
    assert.deepEqual(bodies(await take("none", 0)), []);
    const [tagged] = await take("action", 1);
    assert.equal(tagged.body, "blue-1");
    assert.equal(tagged.applicationProperties.seen, "yes");
    assert.equal(tagged.applicationProperties.color, "navy");
    await admin.deleteTopic(t);
  });

  test("subscription receivers: peek-lock settlement, scheduled messages, the dead-letter queue", async () => {
    const t = uniqueName("t");
    await admin.createTopic(t);
    await admin.createSubscription(t, "s", { maxDeliveryCount: 2 });
    const sender = client.createSender(t);
    await sender.sendMessages([{ body: "a" }, { body: "b" }, { body: "c" }]);
    const [scheduled] = await sender.scheduleMessages({ body: "later" }, new Date(Date.now() + 3600 * 1000));

    const receiver = client.createReceiver(t, "s");
    // A scheduled message waits in the topic and reaches the
    // subscriptions at its time, as in Service Bus.
    assert.equal((await admin.getTopicRuntimeProperties(t)).scheduledMessageCount, 1);
    assert.deepEqual(bodies(await receiver.peekMessages(10)), ["a", "b", "c"]);
    await sender.cancelScheduledMessages(scheduled);
    assert.equal((await admin.getTopicRuntimeProperties(t)).scheduledMessageCount, 0);

    const [a, b, c] = await receiveAll(receiver, 3);
    await receiver.completeMessage(a);
    await receiver.deadLetterMessage(b, { deadLetterReason: "why", deadLetterErrorDescription: "because" });
    await receiver.abandonMessage(c);
    const [c2] = await receiveAll(receiver, 1);
    assert.equal(c2.deliveryCount, 1);
    await receiver.abandonMessage(c2); // MaxDeliveryCount 2: dead-lettered

    const dlq = client.createReceiver(t, "s", { subQueueType: "deadLetter" });
    const dead = await receiveAll(dlq, 2);
    assert.deepEqual(bodies(dead), ["b", "c"]);
    assert.equal(dead[0].deadLetterReason, "why");
    assert.equal(dead[0].deadLetterErrorDescription, "because");
    assert.equal(dead[1].deadLetterReason, "MaxDeliveryCountExceeded");
    for (const m of dead) await dlq.completeMessage(m);
    assert.equal((await receiver.peekMessages(10)).length, 0);
    assert.ok(seq(dead[0].sequenceNumber) > 0);

    // A message scheduled on the topic reaches the subscription on time.
    const at = new Date(Date.now() + 1500);
    await sender.scheduleMessages({ body: "on-time" }, at);
    const [onTime] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 6000 });
    assert.equal(onTime?.body, "on-time");
    assert.ok(Date.now() >= at.getTime() - 50, "not before its time");
    await receiver.completeMessage(onTime);
    await dlq.close();
    await receiver.close();
    await sender.close();
    await admin.deleteTopic(t);
  });

  test("the rule manager: create, list with paging through many rules, delete, errors", async () => {
    const t = uniqueName("t");
    await admin.createTopic(t);
    await admin.createSubscription(t, "s");
    const rules = client.createRuleManager(t, "s");

    await rules.createRule("sql", { sqlExpression: "n > 100" }, { sqlExpression: "SET big = 1" });
    await rules.createRule("corr", { correlationId: "c1", contentType: "text/plain", applicationProperties: { k: "v", n: 3 } });
    let listed = await all(rules.listRules());
    assert.deepEqual(listed.map((r) => r.name), ["$Default", "corr", "sql"]);
    assert.equal(listed[0].filter.sqlExpression, "1=1");
    const corr = listed.find((r) => r.name === "corr");
    assert.equal(corr.filter.correlationId, "c1");
    assert.equal(corr.filter.contentType, "text/plain");
    assert.deepEqual(corr.filter.applicationProperties, { k: "v", n: 3 });
    const sql = listed.find((r) => r.name === "sql");
    assert.equal(sql.filter.sqlExpression, "n > 100");
    assert.equal(sql.action.sqlExpression, "SET big = 1");

    const dup = await expectError(() => rules.createRule("sql", { sqlExpression: "1=1" }));
    assert.equal(dup.code, "MessagingEntityAlreadyExists", String(dup));
    const missing = await expectError(() => rules.deleteRule("no-such-rule"));
    assert.equal(missing.code, "MessagingEntityNotFound", String(missing));
    await expectError(() => rules.createRule("bad", { sqlExpression: "n = = 1" }));

    // Past one page of 100: the SDK pages with skip/top until a page is empty.
    await rules.deleteRule("$Default");
    for (let i = 0; i < 130; i++) await rules.createRule(`r${String(i).padStart(3, "0")}`, { sqlExpression: `n = ${i}` });
    listed = await all(rules.listRules());
    assert.equal(listed.length, 132);
    assert.equal(new Set(listed.map((r) => r.name)).size, 132);
    const pages = await all(rules.listRules().byPage({ maxPageSize: 50 }));
    assert.deepEqual(pages.map((p) => p.length), [50, 50, 32]);

    // The rules route messages: only n = 7 (r007) and n > 100 (sql) match.
    await client.createSender(t).sendMessages([
      { body: "seven", applicationProperties: { n: 7 } },
      { body: "none", applicationProperties: { n: 999.5, skip: true }, correlationId: "x" },
      { body: "big", applicationProperties: { n: 200 } },
    ]);
    const r = client.createReceiver(t, "s", { receiveMode: "receiveAndDelete" });
    const got = await receiveAll(r, 3);
    // "none" matches the sql rule (n > 100) too; each message arrives once.
    assert.deepEqual(bodies(got), ["seven", "none", "big"]);
    assert.equal(got[2].applicationProperties.big, 1);
    await r.close();

    const noSub = await expectError(() => client.createRuleManager(t, "no-such-sub").createRule("x", { sqlExpression: "1=1" }));
    assert.equal(noSub.code, "MessagingEntityNotFound", String(noSub));
    await admin.deleteTopic(t);
  });

  test("errors: a missing subscription, and sending to a subscription", async () => {
    const t = uniqueName("t");
    await admin.createTopic(t);
    await admin.createSubscription(t, "s");
    const recv = await expectError(() => client.createReceiver(t, "no-such-sub").receiveMessages(1, { maxWaitTimeInMs: 2000 }));
    assert.equal(recv.code, "MessagingEntityNotFound", String(recv));
    const peek = await expectError(() => client.createReceiver(t, "no-such-sub").peekMessages(1));
    assert.equal(peek.code, "MessagingEntityNotFound", String(peek));
    const send = await expectError(() => client.createSender(`${t}/Subscriptions/s`).sendMessages({ body: 1 }));
    assert.ok(send.code, String(send));
    await admin.deleteTopic(t);
  });
});
