#!/usr/bin/env bash
# The whole test suite: the Go tests, the JavaScript SDK conformance suite
# (tests/js, which installs its npm packages itself), the Python SDK suite
# (tests/python, which installs Debian's python3-azure and python3-pytest
# with apt-get when missing), the HTTP data plane with curl (tests/curl),
# Microsoft's own Go SDK live tests (tests/azsdk,
# as root: Busbar takes port 443 of a free 127.x.y.z), the benchmark
# harness's smoke run (bench/, its own Go module) and the Testcontainers
# module. Needs go, node 20+, npm and Debian's /usr/bin/python3.
#
# Every part runs even when an earlier one fails; a summary lists each
# part's result and the script exits non-zero if any failed. Extra
# arguments go to `go test` (for example -race or -count=1).
#
# The benchmark smoke runs against Busbar and the null broker only; set
# BUSBAR_BENCH_PEERS=1 (as CI does) to also run it against RabbitMQ and
# nats-server, which installs nats-server and takes a few minutes more.
#
# The cluster parts run the JavaScript, Python and (as root) Go SDK suites
# again against three `busbar serve --cluster` nodes on a throw-away
# PostgreSQL (tests/cluster/run.sh; needs Debian's postgresql package).
#
# BUSBAR_LARGE_MESSAGE_TESTS=1 (set here for the Go tests) adds the runs of
# 100 MB messages to TestLargeMessageMemory (internal/server).
#
# No test needs a well-known port: the suite passes while `busbar serve`
# runs on this machine with its defaults (tests/azsdk's port 443 is on an
# address of its own).
set -uo pipefail
cd "$(dirname "$0")"

results=()
failed=0

# part NAME COMMAND...: runs one part and records its result.
part() {
	local name=$1
	shift
	echo "== $name"
	if "$@"; then
		results+=("ok    $name")
	else
		results+=("FAIL  $name (exit $?)")
		failed=$((failed + 1))
	fi
}

part "go test ./..." env BUSBAR_LARGE_MESSAGE_TESTS=1 go test "$@" ./...
part "tests/js (official @azure/service-bus against busbar)" tests/js/run.sh
part "tests/python (official azure-servicebus on uamqp against busbar)" tests/python/run.sh
part "tests/curl (the HTTP data plane with curl)" tests/curl/run.sh
if [ "$(id -u)" -eq 0 ]; then
	part "tests/azsdk (Microsoft's azservicebus live tests, unmodified)" tests/azsdk/run.sh
else
	echo "== tests/azsdk: skipped (needs root for port 443; run: sudo tests/azsdk/run.sh)"
	results+=("skip  tests/azsdk (needs root)")
fi
part "tests/cluster js (the JS suite against a three-node cluster)" tests/cluster/run.sh js
part "tests/cluster python (the Python suite against a three-node cluster)" tests/cluster/run.sh python
if [ "$(id -u)" -eq 0 ]; then
	part "tests/cluster azsdk (Microsoft's Go SDK live tests against a three-node cluster)" tests/cluster/run.sh azsdk
else
	echo "== tests/cluster azsdk: skipped (needs root for port 443)"
	results+=("skip  tests/cluster azsdk (needs root)")
fi
if [ -f bench/go.mod ]; then
	part "bench smoke (Busbar and the null broker; peers with BUSBAR_BENCH_PEERS=1)" \
		bash -c 'cd bench && go test "$@" ./...' bench "$@"
fi

if [ -f testcontainers/go.mod ]; then
	part "testcontainers module (the container run skips without a runtime)" \
		bash -c 'cd testcontainers && go test "$@" ./...' testcontainers "$@"
fi

echo "== summary"
printf '%s\n' "${results[@]}"
total=${#results[@]}
echo "parts: $((total - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
