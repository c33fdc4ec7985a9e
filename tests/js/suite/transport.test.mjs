// How the JS SDK reaches Busbar besides the emulator's connection string:
// a SAS-token connection string (rhea then skips SASL and the broker
// authorises through $cbs alone), and AMQP over WebSockets on the HTTPS
// listener with the `ws` package as the WebSocket constructor.

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { after, before, describe, test } from "node:test";

import { KEY, KEY_NAME, startBroker } from "../lib/broker.mjs";
import { createQueue, expectError, sb, uniqueName } from "../lib/sb.mjs";

const require = createRequire(import.meta.url);
const WebSocket = require("ws");

/** sasToken signs a token for audience as Service Bus defines it. */
function sasToken(audience, { keyName = KEY_NAME, key = KEY, ttlSeconds = 3600 } = {}) {
  const sr = encodeURIComponent(audience);
  const se = Math.floor(Date.now() / 1000) + ttlSeconds;
  const sig = encodeURIComponent(createHmac("sha256", key).update(`${sr}\n${se}`).digest("base64"));
  return `SharedAccessSignature sr=${sr}&sig=${sig}&se=${se}&skn=${encodeURIComponent(keyName)}`;
}

/** opened returns the broker's "connection opened" log records. */
function opened(broker) {
  return readFileSync(broker.logFile, "utf8")
    .split("\n")
    .filter((l) => l.includes('"connection opened"'))
    .map((l) => JSON.parse(l));
}

/** roundTrip sends a message, receives it in peek-lock and completes it. */
async function roundTrip(client, queue, body) {
  await client.createSender(queue).sendMessages({ body, applicationProperties: { via: body } });
  const receiver = client.createReceiver(queue);
  const got = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10000 });
  assert.equal(got.length, 1);
  assert.equal(got[0].body, body);
  assert.equal(got[0].applicationProperties.via, body);
  await receiver.completeMessage(got[0]);
  const left = await receiver.peekMessages(1);
  assert.equal(left.length, 0, "the completed message is gone");
}

const retryOptions = { maxRetries: 0, timeoutInMs: 20000 };

describe("SAS-token connection string: no SASL, authorised through $cbs", () => {
  let broker, queue;

  before(async () => {
    broker = await startBroker();
    queue = await createQueue(broker);
  });
  after(async () => {
    await broker?.stop();
  });

  const connectionString = (token) =>
    `Endpoint=sb://${broker.amqp};SharedAccessSignature=${token};UseDevelopmentEmulator=true;`;

  test("a namespace token and an entity token send, receive and complete", async () => {
    for (const audience of [`sb://${broker.amqp}/`, `sb://${broker.amqp}/${queue}`]) {
      const before = opened(broker).length;
      const client = new sb.ServiceBusClient(connectionString(sasToken(audience)), { retryOptions });
      try {
        await roundTrip(client, queue, `token for ${audience}`);
      } finally {
        await client.close();
      }
      const conns = opened(broker).slice(before);
      assert.ok(conns.length >= 1, "the broker logged the connection");
      for (const c of conns) assert.equal(c.sasl, "", `rhea negotiated SASL ${c.sasl}; expected none`);
    }
  });

  test("a token signed with the wrong key: UnauthorizedAccess", async () => {
    const client = new sb.ServiceBusClient(connectionString(sasToken(`sb://${broker.amqp}/`, { key: "not-the-key" })), { retryOptions });
    try {
      const err = await expectError(() => client.createSender(queue).sendMessages({ body: "x" }));
      assert.equal(err.code, "UnauthorizedAccess", String(err));
    } finally {
      await client.close();
    }
  });

  test("a token for another entity: UnauthorizedAccess", async () => {
    const other = uniqueName();
    const client = new sb.ServiceBusClient(connectionString(sasToken(`sb://${broker.amqp}/${other}`)), { retryOptions });
    try {
      const err = await expectError(() => client.createSender(queue).sendMessages({ body: "x" }));
      assert.equal(err.code, "UnauthorizedAccess", String(err));
    } finally {
      await client.close();
    }
  });
});

describe("AMQP over WebSockets (webSocketOptions with the ws package)", () => {
  let broker, queue;

  before(async () => {
    broker = await startBroker({ https: true });
    queue = await createQueue(broker);
  });
  after(async () => {
    await broker?.stop();
  });

  const port = () => broker.https.split(":").pop();
  const webSocketOptions = () => ({
    webSocket: WebSocket,
    // wss:// against the development certificate, trusted explicitly.
    webSocketConstructorOptions: { ca: readFileSync(broker.devCertificate) },
  });

  test("send, receive and complete through wss://localhost:PORT/$servicebus/websocket", async () => {
    const before = opened(broker).length;
    const client = new sb.ServiceBusClient(
      `Endpoint=sb://localhost:${port()};SharedAccessKeyName=${KEY_NAME};SharedAccessKey=${KEY}`,
      { retryOptions, webSocketOptions: webSocketOptions() },
    );
    try {
      await roundTrip(client, queue, "over a WebSocket");
      // A batch larger than one WebSocket message of the SDK.
      const sender = client.createSender(queue);
      const batch = await sender.createMessageBatch();
      for (let i = 0; i < 20; i++) assert.ok(batch.tryAddMessage({ body: `${i}:` + "x".repeat(5000) }));
      await sender.sendMessages(batch);
      const receiver = client.createReceiver(queue, { receiveMode: "receiveAndDelete" });
      let n = 0;
      while (n < 20) {
        const got = await receiver.receiveMessages(20 - n, { maxWaitTimeInMs: 5000 });
        assert.ok(got.length > 0, `received ${n} of 20`);
        n += got.length;
      }
    } finally {
      await client.close();
    }
    assert.ok(opened(broker).length > before, "the broker logged the connection");
  });

  test("a SAS-token connection string over WebSockets", async () => {
    const token = sasToken(`sb://localhost:${port()}/`);
    const client = new sb.ServiceBusClient(`Endpoint=sb://localhost:${port()};SharedAccessSignature=${token}`, {
      retryOptions,
      webSocketOptions: webSocketOptions(),
    });
    try {
      await roundTrip(client, queue, "token over a WebSocket");
    } finally {
      await client.close();
    }
  });

  test("a wrong key over WebSockets: UnauthorizedAccess", async () => {
    const client = new sb.ServiceBusClient(
      `Endpoint=sb://localhost:${port()};SharedAccessKeyName=${KEY_NAME};SharedAccessKey=not-the-key`,
      { retryOptions, webSocketOptions: webSocketOptions() },
    );
    try {
      const err = await expectError(() => client.createSender(queue).sendMessages({ body: "x" }));
      assert.equal(err.code, "UnauthorizedAccess", String(err));
    } finally {
      await client.close();
    }
  });
});
