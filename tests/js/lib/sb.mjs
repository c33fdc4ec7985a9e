// The SDK packages under test and small helpers shared by the test files.
// Nothing here stands in for the SDK: every call goes through the real
// clients to a real broker.

import assert from "node:assert/strict";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

/** @azure/service-bus, the released version (package.json pins it). */
export const sb = require("@azure/service-bus");
/** @azure/service-bus 7.10.0-beta.2, whose admin client speaks HTTP to emulators. */
export const sbBeta = require("sb-beta");
const azureLogger = require("@azure/logger");

export function packageVersion(name) {
  return require(`${name}/package.json`).version;
}

let queueCounter = 0;

/** uniqueName returns a fresh entity name for a test. */
export function uniqueName(prefix = "q") {
  queueCounter++;
  return `${prefix}-${process.pid}-${queueCounter}-${Math.random().toString(36).slice(2, 8)}`;
}

/** adminClient returns the emulator-mode (HTTP) administration client of the beta. */
export function adminClient(broker) {
  return new sbBeta.ServiceBusAdministrationClient(broker.httpAdminConnectionString());
}

/** createQueue creates a queue through the administration client. */
export async function createQueue(broker, options = {}, name = uniqueName()) {
  await adminClient(broker).createQueue(name, options);
  return name;
}

/** newClient returns a ServiceBusClient with test-sized retries. */
export function newClient(broker, options = {}) {
  const client = new sb.ServiceBusClient(broker.connectionString(options.connection), {
    retryOptions: { maxRetries: 1, retryDelayInMs: 100, timeoutInMs: 20000 },
    ...options.client,
  });
  return client;
}

/**
 * captureSdkWarnings records what the Azure SDK logs at warning level and
 * above (for example "Time out ... when draining credits. Closing
 * receiver..."). The returned array fills as the SDK logs.
 */
export function captureSdkWarnings() {
  const lines = [];
  azureLogger.setLogLevel("warning");
  azureLogger.AzureLogger.log = (...args) => {
    lines.push(args.map(String).join(" "));
  };
  return lines;
}

/** drainTimeouts filters the SDK warnings about drains the broker did not answer. */
export function drainTimeouts(lines) {
  return lines.filter((l) => /when draining credits/i.test(l));
}

/** bodies returns the bodies of messages, sorted when asked. */
export function bodies(messages, sorted = false) {
  const out = messages.map((m) => m.body);
  return sorted ? out.sort() : out;
}

/** seq converts a sequence number (a Long) to a JS number. */
export function seq(n) {
  return typeof n === "number" ? n : n.toNumber();
}

/** receiveAll receives until n messages arrived (or the deadline passes). */
export async function receiveAll(receiver, n, { batch = n, waitMs = 2000, deadlineMs = 30000 } = {}) {
  const out = [];
  const end = Date.now() + deadlineMs;
  while (out.length < n && Date.now() < end) {
    const got = await receiver.receiveMessages(Math.min(batch, n - out.length), { maxWaitTimeInMs: waitMs });
    out.push(...got);
  }
  assert.equal(out.length, n, `received ${out.length} of ${n} messages`);
  return out;
}

/** expectError runs fn and returns the error it throws (failing if none). */
export async function expectError(fn) {
  try {
    await fn();
  } catch (err) {
    return err;
  }
  assert.fail("expected an error");
}

/** sleep waits ms milliseconds. */
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
