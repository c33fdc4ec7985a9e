#!/usr/bin/env bash
# The SDK suites against a three-node cluster (docs/cluster.md): the
# JavaScript suite (tests/js), the Python suite (tests/python) and
# Microsoft's Go SDK live tests (tests/azsdk), unchanged, each broker they
# would start replaced by three `busbar serve --cluster` nodes.
#
#   tests/cluster/run.sh                 # js, python and (as root) azsdk
#   tests/cluster/run.sh js python       # some of them
#
# It starts one throw-away PostgreSQL for the run (bench/pg-temp.sh: needs
# Debian's postgresql package) and exports BUSBAR_TEST_CLUSTER, its URL:
# each suite's harness then creates a database per broker instance and
# starts the three nodes on loopback ports the kernel picks, with short
# cluster timings. The connection strings the harnesses hand out rotate
# over the nodes, administration one node ahead of messaging, so entities
# are created through one node and used through another. Nodes are
# stopped by their PIDs; PostgreSQL is stopped and its directory removed
# at the end.
#
# Test files whose broker needs a flag --cluster refuses (--faults,
# --namespace-per-key-name, --test-clock) run only in the single-broker
# suites; they are listed below. BUSBAR_BIN=path tests a given binary
# instead of building one. Every named suite runs even when an earlier one
# fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

suites=("$@")
if [ ${#suites[@]} -eq 0 ]; then
	suites=(js python)
	if [ "$(id -u)" -eq 0 ]; then
		suites+=(azsdk)
	else
		echo "cluster: tests/azsdk left out (needs root for port 443)"
	fi
fi

tmp=$(mktemp -d /tmp/busbar-cluster.XXXXXX)
# pg-temp.sh makes this directory itself (as root it hands it to the user
# postgres, who cannot enter $tmp).
pgdir=$(mktemp -u /tmp/busbar-cluster-pg.XXXXXX)
pg_started=
cleanup() {
	[ -n "$pg_started" ] && bench/pg-temp.sh stop "$pgdir"
	rm -rf "$tmp"
}
trap cleanup EXIT

if [ -z "${BUSBAR_BIN:-}" ]; then
	echo "== go build ./cmd/busbar"
	go build -o "$tmp/busbar" ./cmd/busbar || exit 1
	export BUSBAR_BIN="$tmp/busbar"
fi

echo "== PostgreSQL (bench/pg-temp.sh)"
url=$(bench/pg-temp.sh start "$pgdir") || exit 1
pg_started=1
export BUSBAR_TEST_CLUSTER="$url"
echo "cluster: PostgreSQL at $url"

# Not run against a cluster: --cluster refuses the flags their brokers need.
js_single=(suite/faults.test.mjs suite/namespaces.test.mjs suite/time.test.mjs)
py_single=(test_faults.py test_namespaces.py test_time.py)

results=()
failed=0
for suite in "${suites[@]}"; do
	echo "== cluster: $suite"
	start=$SECONDS
	case $suite in
	js)
		files=()
		for f in tests/js/suite/*.test.mjs; do
			f=${f#tests/js/}
			[[ " ${js_single[*]} " == *" $f "* ]] || files+=("$f")
		done
		# Three nodes per test file: two files at a time on a small machine.
		BUSBAR_JS_CONCURRENCY=${BUSBAR_JS_CONCURRENCY:-2} tests/js/run.sh "${files[@]}"
		;;
	python)
		ignore=()
		for f in "${py_single[@]}"; do ignore+=(--ignore "$f"); done
		tests/python/run.sh "${ignore[@]}"
		;;
	azsdk)
		tests/azsdk/run.sh
		;;
	*)
		echo "cluster: unknown suite $suite (js, python, azsdk)" >&2
		false
		;;
	esac
	status=$?
	if [ "$status" -eq 0 ]; then
		results+=("ok    $suite ($((SECONDS - start)) s)")
	else
		results+=("FAIL  $suite (exit $status, $((SECONDS - start)) s)")
		failed=$((failed + 1))
	fi
done

echo "== cluster summary"
printf '%s\n' "${results[@]}"
[ "$failed" -eq 0 ]
