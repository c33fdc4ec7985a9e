#!/usr/bin/env bash
# JavaScript SDK conformance: the official @azure/service-bus against Busbar.
#
#   tests/js/run.sh                 # every test file
#   tests/js/run.sh suite/send.test.mjs
#
# Needs only go, node (20+) and npm. Installs the locked packages with
# `npm ci` when node_modules is missing or does not match package-lock.json,
# builds busbar from this checkout once, and runs the suite with Node's
# built-in test runner; each test file starts its own `busbar serve
# --memory` on free ports (BUSBAR_BIN=path tests a given binary instead of
# building one). BUSBAR_JS_VERBOSE=1 copies the brokers' logs to
# stderr; BUSBAR_JS_KEEP_LOGS=1 keeps them (paths are in failure messages).
set -euo pipefail
cd "$(dirname "$0")"

for tool in go node npm; do
	command -v "$tool" >/dev/null || { echo "run.sh: $tool is required" >&2; exit 2; }
done
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
	echo "run.sh: Node 20 or later is required (found $(node --version))" >&2
	exit 2
fi

# npm ci when node_modules is missing or was installed from another lockfile.
stamp=node_modules/.busbar-lock-sha256
want=$(node -e 'const c=require("crypto"),f=require("fs");process.stdout.write(c.createHash("sha256").update(f.readFileSync("package-lock.json")).digest("hex"))')
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
	echo "== npm ci"
	npm ci --no-audit --no-fund
	echo "$want" >"$stamp"
fi

# BUSBAR_BIN set by the caller tests that binary instead.
if [ -z "${BUSBAR_BIN:-}" ]; then
	echo "== go build ./cmd/busbar"
	bin_dir=$(mktemp -d "${TMPDIR:-/tmp}/busbar-js-bin.XXXXXX")
	trap 'rm -rf "$bin_dir"' EXIT
	(cd ../.. && go build -o "$bin_dir/busbar" ./cmd/busbar)
	export BUSBAR_BIN="$bin_dir/busbar"
fi

echo "== node --test"
if [ $# -eq 0 ]; then
	set -- suite/*.test.mjs
fi
node --test --test-concurrency="${BUSBAR_JS_CONCURRENCY:-4}" "$@"
