#!/usr/bin/env bash
# Microsoft's own live tests for the Go SDK (azservicebus, the version in
# go.mod), run unmodified against Busbar.
#
# The SDK module ships tests that talk to a real namespace: they read
# SERVICEBUS_ENDPOINT and SERVICEBUS_CONNECTION_STRING* and sign in with
# DefaultAzureCredential. This script
#
#   - copies the module's source from the Go module cache into a temporary
#     directory (the cache is read-only) and fetches its test dependencies;
#   - picks a free loopback address 127.0.0.N and makes a certificate for it
#     that the tests trust through SSL_CERT_FILE;
#   - builds Busbar from this repository and starts it there with AMQP over
#     TLS on port 5671 and the admin API on https port 443 (the SDK dials
#     amqps://<namespace>/ and https://<namespace>/ with no port), the shared
#     access policies the tests expect (Manage; Send+Listen; Send; Listen) and
#     the two queues the SDK's test template creates;
#   - puts a stand-in `az` first on PATH: the SDK's DefaultAzureCredential
#     (restricted to AzureCLICredential with AZURE_TOKEN_CREDENTIALS, which
#     saves the managed-identity probe) runs `az account get-access-token -o
#     json --resource https://servicebus.azure.net` and gets an unsigned JWT
#     for that audience, which Busbar's development mode accepts (no roles
#     claim: Data Owner);
#   - runs `go test` on the module's root, admin and internal packages,
#     skipping the tests listed in SKIP below, each with its reason.
#
# Cluster mode (BUSBAR_TEST_CLUSTER=postgres://… naming a PostgreSQL server,
# set by tests/cluster/run.sh): three `busbar serve --cluster` nodes on a
# database of their own on that server, each on its own 127.x.y.z with the
# same ports, one certificate for the three addresses; the two queues are
# created through node 1's admin API (a cluster node does not declare
# Config.json entities), and the root, admin and internal packages run one
# after another with SERVICEBUS_ENDPOINT (what most tests use, for messaging
# and administration alike) at node 1, 2 and 3 in turn and the connection
# strings at the next node.
#
# Needs root (port 443), go, openssl and network access to the Go module
# proxy for the SDK's test-only dependencies (cached after the first run).
# Environment: AZSDK_RUN (a -run pattern, default all), AZSDK_KEEP=1 keeps
# the temporary directory, BUSBAR_BIN (use this binary instead of building).
# Extra arguments go to `go test`.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

mod=github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus
version=$(go list -m -f '{{.Version}}' "$mod")

# Tests that cannot pass against anything but Azure itself, or whose
# timing assertions cannot hold on loopback: a test name, or test/subtest
# (spaces in subtest names written as _). The fault-injector tests skip
# themselves (they need AMQP_FAULT_INJECTOR_PATH, a binary of Azure's).
SKIP=(
	# Signs in to Entra ID (login.microsoftonline.com) with a bogus client
	# secret and expects its refusal: needs Azure itself (and the network).
	TestClientUnauthorizedCreds/invalid_identity_creds
	TestReceiverUnauthorizedCreds/invalid_identity_creds
	# Asserts the text of the HTTP reason phrase ("401 SubCode=40100:
	# Unauthorized : Unauthorized access for 'GetSubscription' ..."), which
	# Azure's front end writes in the status line; Go's net/http server
	# cannot set one (and HTTP/2 has none). Busbar's detail carries the
	# same words.
	TestAdminClient_LackPermissions_Subscription
	# Expects a receive with a 20 s wait after the first message to gather
	# more than 1,000 messages while one with the default wait gathers
	# 1,000: on loopback every message is there at once, so both get all.
	TestReceiveWithDifferentWaitTime
)

tmp=$(mktemp -d /tmp/busbar-azsdk.XXXXXX)
pids=()
stop_busbar() {
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	pids=()
}
cleanup() {
	stop_busbar
	if [ "${AZSDK_KEEP:-}" = 1 ]; then
		echo "azsdk: kept $tmp"
	else
		chmod -R u+w "$tmp" 2>/dev/null || true
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

cluster=${BUSBAR_TEST_CLUSTER:-}
nodes=1
[ -n "$cluster" ] && nodes=3

# The SDK's source, writable.
src=$(go mod download -json "$mod@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
cp -r "$src" "$tmp/azservicebus"
chmod -R u+w "$tmp/azservicebus"
(cd "$tmp/azservicebus" && go mod download)

# Busbar.
bin=${BUSBAR_BIN:-}
if [ -z "$bin" ]; then
	bin="$tmp/busbar"
	go build -o "$bin" ./cmd/busbar
fi

cat >"$tmp/config.json" <<'EOF'
{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
  "Queues": [
    {"Name": "testQueue", "Properties": {}},
    {"Name": "testQueueWithSessions", "Properties": {"RequiresSession": true}}
  ],
  "Topics": []}],
  "Logging": {"Type": "Console"}}}
EOF

key=SAS_KEY_VALUE # the well-known emulator key: development mode accepts unsigned JWTs
policies="RootManageSharedAccessKey=$key:Manage;NoManage=busbar-no-manage:Send,Listen;SendOnly=busbar-send-only:Send;ListenOnly=busbar-listen-only:Listen"

store=
secret=
if [ -n "$cluster" ]; then
	db=t_azsdk_$$_$RANDOM
	psql "$cluster" -qc "CREATE DATABASE $db" >/dev/null
	base=${cluster%%\?*}
	store="${base%/*}/$db${cluster#"$base"}"
	secret=$(openssl rand -hex 32)
fi

# start_node K IP: starts busbar (node K of the cluster in cluster mode) on IP
# with the ports the SDK needs; false unless it got healthy.
start_node() {
	local k=$1 ip=$2 args log=$tmp/busbar.log
	if [ -n "$cluster" ]; then
		args=(--cluster --store "$store" --node-id "n$k" --cluster-listen "$ip:0" --cluster-secret "$secret"
			--cluster-heartbeat 200ms --cluster-lease-ttl 3s --cluster-trust-margin 1s --cluster-poll 200ms
			--data "$tmp/data$k")
		log=$tmp/busbar$k.log
	else
		args=(--data "$tmp/data" --config "$tmp/config.json")
	fi
	rm -rf "$tmp/data$k" "$tmp/data"
	"$bin" serve "${args[@]}" --policies "$policies" \
		--amqp "$ip:5672" --http "$ip:5300" --amqps "$ip:5671" --https "$ip:443" \
		--tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" --log-level warn \
		>"$log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		curl -fsS "http://$ip:5300/health" >/dev/null 2>&1 && return 0
		kill -0 "${pids[-1]}" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# Free loopback addresses with the ports Busbar needs, one per node, and a
# certificate for them.
started=
for _ in 1 2 3 4 5 6 7 8; do
	ips=()
	while [ ${#ips[@]} -lt "$nodes" ]; do
		ip=127.0.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 2))
		[[ " ${ips[*]} " == *" $ip "* ]] || ips+=("$ip")
	done
	san=$(printf 'IP:%s,' "${ips[@]}")
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj "/CN=busbar-azsdk" -addext "subjectAltName=${san%,}" \
		-keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
	started=1
	for k in $(seq "$nodes"); do
		start_node "$k" "${ips[k-1]}" || { started=; break; }
	done
	[ -n "$started" ] && break
	stop_busbar
done
if [ -z "$started" ]; then
	echo "azsdk: could not start Busbar on loopback addresses:" >&2
	cat "$tmp"/busbar*.log >&2
	exit 1
fi
ip=${ips[0]}
if [ -n "$cluster" ]; then
	# Config.json entities are not declared by cluster nodes: the queues
	# the SDK's test template makes, through node 1's admin API.
	"$bin" queue create testQueue --admin "$ip:5300" >/dev/null
	"$bin" queue create testQueueWithSessions --requires-session --admin "$ip:5300" >/dev/null
	echo "azsdk: a Busbar cluster on ${ips[*]} (amqps 5671, https 443), SDK $mod@$version"
else
	echo "azsdk: Busbar on $ip (amqps 5671, https 443), SDK $mod@$version"
fi

# The stand-in az.
mkdir -p "$tmp/bin"
cat >"$tmp/bin/az" <<'EOF'
#!/bin/sh
# A stand-in for the Azure CLI: `az account get-access-token -o json
# --resource R` prints an access token for R (an unsigned JWT, for Busbar's
# development mode), as the real one does.
b64() { base64 | tr -d '\n=' | tr '+/' '-_'; }
case "$*" in
account\ get-access-token*) ;;
*) echo "stand-in az: only 'account get-access-token' is supported" >&2; exit 2 ;;
esac
resource=https://servicebus.azure.net
prev=
for a in "$@"; do
	[ "$prev" = --resource ] && resource=$a
	prev=$a
done
now=$(date +%s)
exp=$((now + 3600))
header=$(printf '{"alg":"RS256","typ":"JWT"}' | b64)
claims=$(printf '{"aud":"%s","iss":"https://sts.windows.net/busbar-azsdk/","tid":"busbar-azsdk","oid":"busbar-azsdk","nbf":%d,"exp":%d}' "$resource" $((now - 60)) "$exp" | b64)
sig=$(printf 'unsigned' | b64)
printf '{"accessToken":"%s.%s.%s","expiresOn":"%s","expires_on":%d,"subscription":"busbar","tenant":"busbar-azsdk","tokenType":"Bearer"}\n' \
	"$header" "$claims" "$sig" "$(date -d "@$exp" '+%Y-%m-%d %H:%M:%S.000000')" "$exp"
EOF
chmod +x "$tmp/bin/az"

cs() { echo "Endpoint=sb://$1/;SharedAccessKeyName=$2;SharedAccessKey=$3"; }
export AZURE_RECORD_MODE=live
export AZURE_TOKEN_CREDENTIALS=AzureCLICredential
export PATH="$tmp/bin:$PATH"
export SSL_CERT_FILE="$tmp/cert.pem"

# point A B: the endpoint (token credential: most tests, messaging and
# administration) at address A, the connection strings at B.
point() {
	export SERVICEBUS_ENDPOINT="$1" SERVICEBUS_ENDPOINT_PREMIUM="$1"
	SERVICEBUS_CONNECTION_STRING=$(cs "$2" RootManageSharedAccessKey "$key")
	export SERVICEBUS_CONNECTION_STRING
	export SERVICEBUS_CONNECTION_STRING_PREMIUM="$SERVICEBUS_CONNECTION_STRING"
	SERVICEBUS_CONNECTION_STRING_NO_MANAGE=$(cs "$2" NoManage busbar-no-manage)
	SERVICEBUS_CONNECTION_STRING_SEND_ONLY=$(cs "$2" SendOnly busbar-send-only)
	SERVICEBUS_CONNECTION_STRING_LISTEN_ONLY=$(cs "$2" ListenOnly busbar-listen-only)
	export SERVICEBUS_CONNECTION_STRING_NO_MANAGE SERVICEBUS_CONNECTION_STRING_SEND_ONLY SERVICEBUS_CONNECTION_STRING_LISTEN_ONLY
}

# One -skip pattern: alternatives joined with |, each test/subtest
# element anchored (go test splits alternatives first, then elements).
skip=
for t in "${SKIP[@]}"; do
	skip="${skip:+$skip|}^${t//\//\$/^}\$"
done
cd "$tmp/azservicebus"
status=0
if [ -z "$cluster" ]; then
	point "$ip" "$ip"
	go test -count=1 -timeout 10m -run "${AZSDK_RUN:-.}" ${skip:+-skip "$skip"} "$@" . ./admin ./internal || status=$?
else
	pkgs=(. ./admin ./internal)
	for k in 0 1 2; do
		point "${ips[k]}" "${ips[(k + 1) % 3]}"
		echo "azsdk: ${pkgs[k]} with the endpoint at node $((k + 1)), the connection strings at node $(((k + 1) % 3 + 1))"
		go test -count=1 -timeout 10m -run "${AZSDK_RUN:-.}" ${skip:+-skip "$skip"} "$@" "${pkgs[k]}" || status=$?
	done
fi
if [ "$status" != 0 ]; then
	for f in "$tmp"/busbar*.log; do
		echo "azsdk: $(basename "$f") (last 50 lines):"
		tail -n 50 "$f"
	done
fi
exit "$status"
