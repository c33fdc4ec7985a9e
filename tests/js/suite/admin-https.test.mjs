// ServiceBusAdministrationClient of the released @azure/service-bus, which
// speaks only HTTPS, against `busbar serve --https --dev-tls`. Node trusts
// the broker's self-signed development certificate either through the
// client's tlsOptions or, as an application would, NODE_EXTRA_CA_CERTS.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { startBroker } from "../lib/broker.mjs";
import { expectError, newClient, packageVersion, sb, uniqueName } from "../lib/sb.mjs";

const run = promisify(execFile);

describe("administration client over HTTPS (released version, dev certificate)", () => {
  let broker, admin;

  before(async () => {
    broker = await startBroker({ https: true });
    assert.ok(broker.https, "the ready line names the https address");
    assert.ok(broker.devCertificate, "the ready line names the dev certificate");
    admin = new sb.ServiceBusAdministrationClient(broker.httpsAdminConnectionString(), {
      tlsOptions: { ca: readFileSync(broker.devCertificate) },
    });
  });
  after(async () => {
    await broker?.stop();
  });

  test("the released version is in use", () => {
    assert.match(packageVersion("@azure/service-bus"), /^7\.\d+\.\d+$/);
  });

  test("queue CRUD, listing and runtime properties", async () => {
    const ns = await admin.getNamespaceProperties();
    assert.equal(typeof ns.name, "string");

    const name = uniqueName("tls");
    const created = await admin.createQueue(name, { maxDeliveryCount: 4, lockDuration: "PT30S" });
    assert.equal(created.maxDeliveryCount, 4);
    assert.equal(created.lockDuration, "PT30S");
    assert.equal(await admin.queueExists(name), true);

    const q = await admin.getQueue(name);
    q.maxDeliveryCount = 6;
    assert.equal((await admin.updateQueue(q)).maxDeliveryCount, 6);

    const names = [];
    for await (const page of admin.listQueues().byPage({ maxPageSize: 2 })) names.push(...page.map((x) => x.name));
    assert.ok(names.includes(name));

    const client = newClient(broker);
    try {
      await client.createSender(name).sendMessages([{ body: 1 }, { body: 2 }]);
    } finally {
      await client.close();
    }
    const rt = await admin.getQueueRuntimeProperties(name);
    assert.equal(rt.activeMessageCount, 2);
    assert.equal(rt.totalMessageCount, 2);

    const dup = await expectError(() => admin.createQueue(name));
    assert.equal(dup.code, "MessageEntityAlreadyExistsError", String(dup));
    await admin.deleteQueue(name);
    assert.equal(await admin.queueExists(name), false);
  });

  test("without trusting the certificate the client refuses the connection", async () => {
    const untrusting = new sb.ServiceBusAdministrationClient(broker.httpsAdminConnectionString(), {
      retryOptions: { maxRetries: 0 },
    });
    const err = await expectError(() => untrusting.getNamespaceProperties());
    assert.match(String(err.code ?? err.message), /SELF_SIGNED|CERT|certificate/i, String(err));
  });

  test("an application trusting the certificate with NODE_EXTRA_CA_CERTS", async () => {
    const script = fileURLToPath(new URL("../lib/admin-https-app.mjs", import.meta.url));
    const name = uniqueName("extra-ca");
    const { stdout } = await run(process.execPath, [script, name], {
      env: {
        ...process.env,
        NODE_EXTRA_CA_CERTS: broker.devCertificate,
        BUSBAR_ADMIN_CONNECTION_STRING: broker.httpsAdminConnectionString(),
      },
      timeout: 60000,
    });
    const result = JSON.parse(stdout);
    assert.equal(result.created, name);
    assert.equal(result.exists, true);
    assert.equal(result.deleted, true);
  });
});
