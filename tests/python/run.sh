#!/usr/bin/env bash
# Python SDK conformance: the official azure-servicebus (Debian's
# python3-azure, 7.8.2 on Azure's C uamqp) against Busbar.
#
#   tests/python/run.sh                       # every test file
#   tests/python/run.sh test_large.py -k batch
#
# Needs go and Debian's /usr/bin/python3. Installs python3-azure and
# python3-pytest with apt-get when they are missing (as root, or through
# sudo), builds busbar from this checkout once, and runs the suite with
# pytest; the brokers run on loopback ports the kernel picks, with TLS.
# BUSBAR_BIN=path tests a given binary instead of building one;
# BUSBAR_PY_VERBOSE=1 copies the broker's log to stderr, BUSBAR_PY_KEEP_LOGS=1
# keeps it. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"

# Debian's python3-azure installs for the system interpreter, not for a
# python3 earlier on PATH (pyenv and the like).
py=/usr/bin/python3
command -v go >/dev/null || { echo "run.sh: go is required" >&2; exit 2; }
[ -x "$py" ] || { echo "run.sh: $py is required (Debian's python3)" >&2; exit 2; }

have_packages() { "$py" -c 'import azure.servicebus, uamqp, pytest' 2>/dev/null; }
if ! have_packages; then
	echo "== apt-get install python3-azure python3-pytest"
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null || { echo "run.sh: not root and no sudo: install python3-azure and python3-pytest" >&2; exit 2; }
		sudo="sudo"
	fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-azure python3-pytest >/dev/null
	have_packages || { echo "run.sh: azure.servicebus, uamqp or pytest still missing" >&2; exit 2; }
fi
"$py" -c 'import azure.servicebus, uamqp, pytest; print("== azure-servicebus %s on uamqp %s, pytest %s" % (azure.servicebus.__version__, uamqp.__version__, pytest.__version__))'

if [ -z "${BUSBAR_BIN:-}" ]; then
	echo "== go build ./cmd/busbar"
	bin_dir=$(mktemp -d "${TMPDIR:-/tmp}/busbar-py-bin.XXXXXX")
	trap 'rm -rf "$bin_dir"' EXIT
	(cd ../.. && go build -o "$bin_dir/busbar" ./cmd/busbar)
	export BUSBAR_BIN="$bin_dir/busbar"
fi

echo "== pytest"
export PYTHONDONTWRITEBYTECODE=1
status=0
"$py" -m pytest -p no:cacheprovider -q -rs "$@" || status=$?
if [ "$status" -eq 5 ]; then
	echo "run.sh: pytest collected no tests" >&2
	exit 1
fi
exit "$status"
