#!/usr/bin/env bash
# The whole test suite: the Go tests, the JavaScript SDK conformance suite
# (tests/js, which installs its npm packages itself), the Python SDK suite
# (tests/python, which installs Debian's python3-azure and python3-pytest
# with apt-get when missing) and the benchmark harness's smoke run (bench/,
# its own Go module). Needs go, node 20+, npm and Debian's /usr/bin/python3.
# Extra arguments go to `go test` (for example -race or -count=1).
set -euo pipefail
cd "$(dirname "$0")"

echo "== go test ./..."
go test "$@" ./...

echo "== tests/js (official @azure/service-bus against busbar)"
tests/js/run.sh

echo "== tests/python (official azure-servicebus on uamqp against busbar)"
tests/python/run.sh

if [ -f bench/go.mod ]; then
	echo "== bench smoke (Busbar, the null broker and the peers, seconds)"
	(cd bench && go test "$@" ./...)
fi
