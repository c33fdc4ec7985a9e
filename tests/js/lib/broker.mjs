// Starts a real Busbar broker for a test file: built from this checkout
// (or taken from BUSBAR_BIN, which run.sh sets after building once), serving
// in memory on free ports, stopped when the file is done.

import { spawn, execFileSync } from "node:child_process";
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
export async function startBroker({ https = false, extraArgs = [] } = {}) {
  const bin = buildBroker();
  // A private TMPDIR keeps the dev certificate (written under the temp
  // directory with --memory) apart from other brokers running in parallel.
  const work = mkdtempSync(path.join(tmpdir(), "busbar-js-"));
  const logFile = path.join(work, "busbar.log");
  const args = ["serve", "--memory", "--amqp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug"];
  if (https) args.push("--https", "127.0.0.1:0", "--dev-tls");
  args.push(...extraArgs);
  const child = spawn(bin, args, {
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
  });

  let stopped = false;
  return {
    amqp: ready.amqp,
    http: ready.http,
    https: ready.https,
    devCertificate: ready.dev_certificate,
    logFile,
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
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 20000);
      const { code, signal } = await exited;
      clearTimeout(timer);
      if (code !== 0) {
        throw new Error(`busbar exited with code ${code}, signal ${signal}; log: ${logFile}`);
      }
      if (process.env.BUSBAR_JS_KEEP_LOGS !== "1") rmSync(work, { recursive: true, force: true });
    },
  };
}
