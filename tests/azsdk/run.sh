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
busbar_pid=
cleanup() {
	if [ -n "$busbar_pid" ]; then
		kill "$busbar_pid" 2>/dev/null || true
		wait "$busbar_pid" 2>/dev/null || true
	fi
	if [ "${AZSDK_KEEP:-}" = 1 ]; then
		echo "azsdk: kept $tmp"
	else
		chmod -R u+w "$tmp" 2>/dev/null || true
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

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

# A free loopback address with the three ports Busbar needs.
started=
for _ in 1 2 3 4 5 6 7 8; do
	ip=127.0.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 2))
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj "/CN=busbar-azsdk" -addext "subjectAltName=IP:$ip" \
		-keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
	rm -rf "$tmp/data"
	"$bin" serve --data "$tmp/data" --config "$tmp/config.json" --policies "$policies" \
		--amqp "$ip:5672" --http "$ip:5300" --amqps "$ip:5671" --https "$ip:443" \
		--tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" --log-level warn \
		>"$tmp/busbar.log" 2>&1 &
	busbar_pid=$!
	for _ in $(seq 100); do
		if curl -fsS "http://$ip:5300/health" >/dev/null 2>&1; then
			started=1
			break
		fi
		kill -0 "$busbar_pid" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$started" ] && break
	kill "$busbar_pid" 2>/dev/null || true
	wait "$busbar_pid" 2>/dev/null || true
	busbar_pid=
done
if [ -z "$started" ]; then
	echo "azsdk: could not start Busbar on a loopback address:" >&2
	cat "$tmp/busbar.log" >&2
	exit 1
fi
echo "azsdk: Busbar on $ip (amqps 5671, https 443), SDK $mod@$version"

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

cs() { echo "Endpoint=sb://$ip/;SharedAccessKeyName=$1;SharedAccessKey=$2"; }
export AZURE_RECORD_MODE=live
export AZURE_TOKEN_CREDENTIALS=AzureCLICredential
export PATH="$tmp/bin:$PATH"
export SSL_CERT_FILE="$tmp/cert.pem"
export SERVICEBUS_ENDPOINT="$ip" SERVICEBUS_ENDPOINT_PREMIUM="$ip"
SERVICEBUS_CONNECTION_STRING=$(cs RootManageSharedAccessKey "$key")
export SERVICEBUS_CONNECTION_STRING
export SERVICEBUS_CONNECTION_STRING_PREMIUM="$SERVICEBUS_CONNECTION_STRING"
SERVICEBUS_CONNECTION_STRING_NO_MANAGE=$(cs NoManage busbar-no-manage)
SERVICEBUS_CONNECTION_STRING_SEND_ONLY=$(cs SendOnly busbar-send-only)
SERVICEBUS_CONNECTION_STRING_LISTEN_ONLY=$(cs ListenOnly busbar-listen-only)
export SERVICEBUS_CONNECTION_STRING_NO_MANAGE SERVICEBUS_CONNECTION_STRING_SEND_ONLY SERVICEBUS_CONNECTION_STRING_LISTEN_ONLY

# One -skip pattern: alternatives joined with |, each test/subtest
# element anchored (go test splits alternatives first, then elements).
skip=
for t in "${SKIP[@]}"; do
	skip="${skip:+$skip|}^${t//\//\$/^}\$"
done
cd "$tmp/azservicebus"
status=0
go test -count=1 -timeout 10m -run "${AZSDK_RUN:-.}" ${skip:+-skip "$skip"} "$@" . ./admin ./internal || status=$?
if [ "$status" != 0 ]; then
	echo "azsdk: Busbar's log (last 50 lines):"
	tail -n 50 "$tmp/busbar.log"
fi
exit "$status"
