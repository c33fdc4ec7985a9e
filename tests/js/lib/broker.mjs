// Starts a real Busbar broker for a test file: built from this checkout
// (or taken from BUSBAR_BIN, which run.sh sets after building once), serving
// in memory on free ports, stopped when the file is done.
//
// Cluster mode (BUSBAR_TEST_CLUSTER=postgres://… naming a PostgreSQL
// server, set by tests/cluster/run.sh): the "broker" is three `busbar serve
// --cluster` nodes sharing a database of their own on that server, with
// short timings. Each connection string the broker object hands out names
// the next node in turn, the administration ones starting one node further
// on, so entities are created through one node and used through another.

import { spawn, execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { appendFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

export const KEY_NAME = "RootManageSharedAccessKey";
export const KEY = "SAS_KEY_VALUE";

let builtBinary;

/** buildBroker returns the path of a busbar binary built from the checkout. */
export function buildBroker() {
  if (process.env.BUSBAR_BIN) return process.env.BUSBAR_BIN;
  if (builtBinary) return builtBinary;
  const dir = mkdtempSync(path.join(tmpdir(), "busbar-js-bin-"));
  const bin = path.join(dir, "busbar");
  execFileSync("go", ["build", "-o", bin, "./cmd/busbar"], { cwd: repoRoot, stdio: ["ignore", "inherit", "inherit"] });
  builtBinary = bin;
  return bin;
}

/** connectionString is the emulator connection string for an endpoint. */
export function connectionString(hostPort, { key = KEY, keyName = KEY_NAME, emulator = true } = {}) {
  return (
    `Endpoint=sb://${hostPort};SharedAccessKeyName=${keyName};SharedAccessKey=${key};` +
    (emulator ? "UseDevelopmentEmulator=true;" : "")
  );
}

/**
 * startBroker runs `busbar serve --memory` on free ports and resolves once
 * it logged "busbar ready". With https it also serves HTTPS with --dev-tls.
 * The broker's log goes to a file (logFile); BUSBAR_JS_VERBOSE=1 copies it
 * to stderr.
 */
export async function startBroker(opts = {}) {
  if (process.env.BUSBAR_TEST_CLUSTER) return startCluster(opts);
  return startOne(opts);
}

async function startOne({ https = false, extraArgs = [] } = {}) {
  // A private TMPDIR keeps the dev certificate (written under the temp
  // directory with --memory) apart from other brokers running in parallel.
  const work = mkdtempSync(path.join(tmpdir(), "busbar-js-"));
  const args = ["serve", "--memory", "--amqp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug"];
  if (https) args.push("--https", "127.0.0.1:0", "--dev-tls");
  args.push(...extraArgs);
  const proc = await spawnBusbar(args, work, path.join(work, "busbar.log"));
  const ready = proc.ready;
  let stopped = false;
  return {
    amqp: ready.amqp,
    http: ready.http,
    https: ready.https,
    devCertificate: ready.dev_certificate,
    logFile: proc.logFile,
    /** The AMQP connection string (ServiceBusClient). */
    connectionString: (opts) => connectionString(ready.amqp, opts),
    /** The emulator-mode admin connection string: plain HTTP on --http. */
    httpAdminConnectionString: (opts) => connectionString(ready.http, opts),
    /** The cloud-style admin connection string: HTTPS on --https. */
    httpsAdminConnectionString: (opts) => connectionString(ready.https, { emulator: false, ...opts }),
    /** stop sends SIGTERM and waits for the broker to exit cleanly. */
    async stop() {
      if (stopped) return;
      stopped = true;
      await proc.stop();
      if (process.env.BUSBAR_JS_KEEP_LOGS !== "1") rmSync(work, { recursive: true, force: true });
    },
  };
}

/**
 * The cluster's timings: polls short, so that placement and moves are quick;
 * a trust window of 2 s, so that a node on a busy machine does not lapse.
 */
const clusterTimings = [
  "--cluster-heartbeat", "200ms", "--cluster-lease-ttl", "3s",
  "--cluster-trust-margin", "1s", "--cluster-poll", "200ms",
];

/**
 * startCluster runs three `busbar serve --cluster` nodes on a database of
 * their own (created on the BUSBAR_TEST_CLUSTER server with psql) and
 * resolves once all three are ready and have seen each other. Node 1
 * starts first so that it writes the development certificate the others
 * then share (--data is common to the three).
 */
async function startCluster({ https = false, extraArgs = [] } = {}) {
  const server = new URL(process.env.BUSBAR_TEST_CLUSTER);
  const db = `t_${randomBytes(6).toString("hex")}`;
  execFileSync("psql", [server.href, "-qc", `CREATE DATABASE ${db}`], { stdio: ["ignore", "ignore", "inherit"] });
  const store = new URL(server.href);
  store.pathname = `/${db}`;
  const work = mkdtempSync(path.join(tmpdir(), "busbar-js-cluster-"));
  const secret = randomBytes(32).toString("hex");
  // Every node's log also goes, line by line, to one file: what a test
  // that reads "the broker's log" reads. The records of the nodes'
  // internal listener (connections between nodes, "listener":"internal")
  // stay out of it: they are not the clients' (n1.log … have everything).
  const combined = path.join(work, "cluster.log");
  const nodes = [];
  const start = (k) => {
    const args = [
      "serve", "--cluster", "--store", store.href, "--data", path.join(work, "data"),
      "--node-id", `n${k}`, "--cluster-listen", "127.0.0.1:0", "--cluster-secret", secret, ...clusterTimings,
      "--amqp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug",
    ];
    if (https) args.push("--https", "127.0.0.1:0", "--dev-tls");
    args.push(...extraArgs);
    return spawnBusbar(args, work, path.join(work, `n${k}.log`), combined);
  };
  const stopAll = () => Promise.allSettled(nodes.map((n) => n.stop()));
  try {
    nodes.push(await start(1));
    // Every node that got ready is kept (and so stopped) even when the
    // other one failed.
    const rest = await Promise.allSettled([start(2), start(3)]);
    for (const r of rest) if (r.status === "fulfilled") nodes.push(r.value);
    const failed = rest.find((r) => r.status === "rejected");
    if (failed) throw failed.reason;
  } catch (err) {
    await stopAll();
    throw err;
  }
  // Two polls, so that each node has seen the others before the first
  // entity is created (placement then sends it where it stays).
  await new Promise((resolve) => setTimeout(resolve, 500));

  const pick = (counter) => () => nodes[counter.n++ % nodes.length].ready;
  const amqpNode = pick({ n: clusterInstances });
  const adminNode = pick({ n: clusterInstances + 1 });
  const first = nodes[clusterInstances % nodes.length].ready;
  clusterInstances++;
  let stopped = false;
  return {
    // A test that dials an address itself gets one node: the instance's
    // first, which differs from file to file.
    amqp: first.amqp,
    http: first.http,
    https: first.https,
    devCertificate: first.dev_certificate,
    logFile: combined,
    nodes: nodes.map((n) => n.ready),
    connectionString: (opts) => connectionString(amqpNode().amqp, opts),
    httpAdminConnectionString: (opts) => connectionString(adminNode().http, opts),
    httpsAdminConnectionString: (opts) => connectionString(adminNode().https, { emulator: false, ...opts }),
    /** stop sends SIGTERM to the three nodes and waits for them to exit cleanly. */
    async stop() {
      if (stopped) return;
      stopped = true;
      const results = await stopAll();
      const failed = results.filter((r) => r.status === "rejected");
      if (failed.length > 0) throw failed[0].reason;
      if (process.env.BUSBAR_JS_KEEP_LOGS !== "1") rmSync(work, { recursive: true, force: true });
    },
  };
}

// The node a cluster instance starts its rotation at: it differs from
// test file to file (each runs in a process of its own) and from instance
// to instance within one, and is the same from run to run.
let clusterInstances = [...path.basename(process.argv[1] ?? "")].reduce((sum, c) => sum + c.charCodeAt(0), 0);

/**
 * spawnBusbar runs busbar with args in work (also its TMPDIR), its log in
 * logFile (and in alsoLog when given), and resolves once it logged "busbar ready" with { ready (that
 * record), logFile, stop() }: stop sends SIGTERM and rejects unless it
 * exits with 0 within 20 s (then it is killed).
 */
async function spawnBusbar(args, work, logFile, alsoLog) {
  const child = spawn(buildBroker(), args, {
    cwd: work,
    env: { ...process.env, TMPDIR: work },
    stdio: ["ignore", "inherit", "pipe"],
  });
  const verbose = process.env.BUSBAR_JS_VERBOSE === "1";
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));

  const ready = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`busbar did not get ready in 30 s; log: ${logFile}`)), 30000);
    const lines = readline.createInterface({ input: child.stderr });
    lines.on("line", (line) => {
      appendFileSync(logFile, line + "\n");
      if (alsoLog && !line.includes('"listener":"internal"')) appendFileSync(alsoLog, line + "\n");
      if (verbose) process.stderr.write(`[busbar] ${line}\n`);
      let rec;
      try {
        rec = JSON.parse(line);
      } catch {
        return;
      }
      if (rec.msg === "busbar ready") {
        clearTimeout(timer);
        resolve(rec);
      }
    });
    child.on("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`busbar exited before it was ready (code ${code}, signal ${signal}); log: ${logFile}`));
    });
  }).catch((err) => {
    child.kill("SIGKILL");
    throw err;
  });

  let stopping;
  return {
    ready,
    logFile,
    stop() {
      stopping ??= (async () => {
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 20000);
        const { code, signal } = await exited;
        clearTimeout(timer);
        if (code !== 0) {
          throw new Error(`busbar exited with code ${code}, signal ${signal}; log: ${logFile}`);
        }
      })();
      return stopping;
    },
  };
}
