#!/usr/bin/env bash
# The HTTP data plane with curl, as docs/http-data-plane.md shows it: a
# broker on loopback ports the kernel picks (in memory), a SAS token made
# with openssl, send (single and batch), peek-lock, unlock, complete,
# receive-and-delete. Needs go (unless BUSBAR_BIN is set), curl, openssl
# and python3.
set -euo pipefail
cd "$(dirname "$0")"
for c in curl openssl python3; do command -v $c >/dev/null || { echo "run.sh: $c is required" >&2; exit 2; }; done

work=$(mktemp -d "${TMPDIR:-/tmp}/busbar-curl.XXXXXX")
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
if [ -z "${BUSBAR_BIN:-}" ]; then
	(cd ../.. && go build -o "$work/busbar" ./cmd/busbar)
	BUSBAR_BIN="$work/busbar"
fi
"$BUSBAR_BIN" serve --memory --amqp 127.0.0.1:0 --http 127.0.0.1:0 --log-format json >"$work/log" 2>&1 &
pid=$!
addr=""
for _ in $(seq 100); do
	addr=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("msg") == "busbar ready": print(m["http"])' "$work/log")
	[ -n "$addr" ] && break
	sleep 0.1
done
[ -n "$addr" ] || { cat "$work/log" >&2; echo "run.sh: busbar did not start" >&2; exit 1; }
base="http://$addr"
"$BUSBAR_BIN" queue create orders --admin "$addr" --connection-string "Endpoint=sb://127.0.0.1;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;" >/dev/null

# sas URL KEYNAME KEY: as in docs/http-data-plane.md.
sas() {
	local sr se sig
	sr=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1")
	se=$(($(date +%s) + 3600))
	sig=$(printf '%s\n%s' "$sr" "$se" | openssl dgst -sha256 -hmac "$3" -binary | base64)
	sig=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$sig")
	echo "SharedAccessSignature sr=$sr&sig=$sig&se=$se&skn=$2"
}
TOKEN=$(sas "$base" RootManageSharedAccessKey SAS_KEY_VALUE)

fail() { echo "FAIL: $*" >&2; exit 1; }
# status METHOD PATH [curl args]: prints the HTTP status; headers in $work/h, body in $work/b.
status() {
	local m=$1 p=$2
	shift 2
	curl -sS -o "$work/b" -D "$work/h" -w '%{http_code}' -X "$m" "$base$p" -H "Authorization: $TOKEN" "$@"
}
header() { grep -i "^$1:" "$work/h" | head -1 | cut -d' ' -f2- | tr -d '\r'; }

[ "$(status POST /orders/messages -H 'Content-Type: application/json' \
	-H 'BrokerProperties: {"Label":"new-order","MessageId":"order-1","TimeToLive":3600}' \
	-H 'Priority: "High"' -H 'Attempt: 3' -d '{"id": 1}')" = 201 ] || fail "send: $(cat "$work/b")"
[ "$(status POST '/orders/messages/head?timeout=5')" = 201 ] || fail "peek-lock"
[ "$(cat "$work/b")" = '{"id": 1}' ] || fail "body $(cat "$work/b")"
[ "$(header Priority)" = '"High"' ] || fail "Priority $(header Priority)"
[ "$(header Attempt)" = 3 ] || fail "Attempt $(header Attempt)"
header BrokerProperties | grep -q '"Label":"new-order"' || fail "BrokerProperties $(header BrokerProperties)"
loc=$(header Location)
[ "$(curl -sS -o /dev/null -w '%{http_code}' -X PUT "$loc" -H "Authorization: $TOKEN")" = 200 ] || fail "unlock"
[ "$(status POST '/orders/messages/head?timeout=5')" = 201 ] || fail "peek-lock again"
header BrokerProperties | grep -q '"DeliveryCount":2' || fail "delivery count $(header BrokerProperties)"
loc=$(header Location)
[ "$(curl -sS -o /dev/null -w '%{http_code}' -X POST "$loc" -H "Authorization: $TOKEN")" = 200 ] || fail "renew"
[ "$(curl -sS -o /dev/null -w '%{http_code}' -X DELETE "$loc" -H "Authorization: $TOKEN")" = 200 ] || fail "complete"
[ "$(curl -sS -o /dev/null -w '%{http_code}' -X DELETE "$loc" -H "Authorization: $TOKEN")" = 404 ] || fail "complete twice"

[ "$(status POST /orders/messages -H 'Content-Type: application/vnd.microsoft.servicebus.json' \
	-d '[{"Body":"first","BrokerProperties":{"Label":"M1","TimeToLiveTimeSpan":"0.00:00:40"}},
	     {"Body":"second","UserProperties":{"Priority":"Low","Attempt":2}}]')" = 201 ] || fail "batch: $(cat "$work/b")"
[ "$(status DELETE '/orders/messages/head?timeout=5')" = 200 ] && [ "$(cat "$work/b")" = first ] || fail "receive first"
[ "$(status DELETE '/orders/messages/head?timeout=5')" = 200 ] && [ "$(cat "$work/b")" = second ] || fail "receive second"
[ "$(header Priority)" = '"Low"' ] || fail "second's Priority $(header Priority)"
[ "$(status DELETE '/orders/messages/head?timeout=0')" = 204 ] || fail "empty queue"
[ "$(status POST /nosuch/messages -d x)" = 410 ] || fail "missing queue"
[ "$(curl -sS -o /dev/null -w '%{http_code}' -X POST "$base/orders/messages" -d x)" = 401 ] || fail "no token"
echo "ok: the HTTP data plane with curl"
