// A tiny application run by suite/admin-https.test.mjs in its own Node
// process, started with NODE_EXTRA_CA_CERTS naming Busbar's development
// certificate: it uses the released ServiceBusAdministrationClient with no
// TLS options at all, as an application would, and prints what it saw.
//
//   node admin-https-app.mjs QUEUE   (BUSBAR_ADMIN_CONNECTION_STRING set)

import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { ServiceBusAdministrationClient } = require("@azure/service-bus");

const name = process.argv[2];
const admin = new ServiceBusAdministrationClient(process.env.BUSBAR_ADMIN_CONNECTION_STRING);
const created = await admin.createQueue(name);
const exists = await admin.queueExists(name);
await admin.deleteQueue(name);
const deleted = !(await admin.queueExists(name));
process.stdout.write(JSON.stringify({ created: created.name, exists, deleted }) + "\n");
