// The packages under test are the ones package.json asks for: the released
// @azure/service-bus, the 7.10.0-beta.2 alias, and an @azure/core-amqp new
// enough (4.3.4+) to honour the port in an emulator connection string.

import assert from "node:assert/strict";
import { test } from "node:test";

import { packageVersion } from "../lib/sb.mjs";

const atLeast = (v, min) => {
  const a = v.split(/[.-]/).slice(0, 3).map(Number);
  const b = min.split(".").map(Number);
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] > b[i];
  return true;
};

test("package versions", () => {
  assert.match(packageVersion("@azure/service-bus"), /^7\.\d+\.\d+$/, "a released 7.x");
  assert.equal(packageVersion("sb-beta"), "7.10.0-beta.2");
  const coreAmqp = packageVersion("@azure/core-amqp");
  assert.ok(atLeast(coreAmqp, "4.3.4"), `@azure/core-amqp ${coreAmqp} honours the Endpoint's port only from 4.3.4`);
});
