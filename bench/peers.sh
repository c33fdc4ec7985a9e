#!/usr/bin/env bash
# Busbar vs RabbitMQ vs NATS JetStream, one broker at a time, on this machine.
#
#   bench/peers.sh [busbar-bench flags...]      e.g. bench/peers.sh -workloads W1,W2
#
# 1. Installs the peers outside the repository:
#    rabbitmq-server 3.10 from Debian (apt-get; the image's policy-rc.d keeps
#    it from starting as a service), and nats-server v2.15.2 built from the Go
#    module proxy into $PEERS_DIR (default $HOME/.cache/busbar-bench-peers).
# 2. Runs busbar-bench, which builds Busbar from the committed HEAD, then
#    starts each broker itself on loopback and private ports as §4.5 describes
#    (RabbitMQ: the package's own sbin scripts, node bench@localhost, AMQP
#    127.0.0.1:25673, distribution 25674 bound to 127.0.0.1, epmd
#    127.0.0.1:24369, +S 2, plugin rabbitmq_amqp1_0, fresh mnesia/log dirs;
#    NATS: 127.0.0.1:14222 default sync, 127.0.0.1:14223 sync_interval:
#    always; Busbar: 127.0.0.1:25800/25801), runs the workloads
#    sequentially, and stops each process it started by PID (RabbitMQ with
#    rabbitmqctl stop, then the epmd it spawned).
# 3. Writes results.md and results.csv into $OUT (default
#    /tmp/busbar-bench-results/<date>); replace the figures in docs/benchmarks.md and copy results.csv to bench/results/.
set -euo pipefail
cd "$(dirname "$0")"

PEERS_DIR=${PEERS_DIR:-$HOME/.cache/busbar-bench-peers}
OUT=${OUT:-/tmp/busbar-bench-results/$(date -u +%Y%m%d-%H%M%S)}
WORK=${WORK:-/tmp/busbar-bench-work}
NATS_VERSION=v2.15.2
mkdir -p "$PEERS_DIR/bin" "$OUT"

# --- RabbitMQ 3.10 from Debian
if ! dpkg -s rabbitmq-server >/dev/null 2>&1; then
	echo "== apt-get install rabbitmq-server" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
fi
RMQ_SBIN=$(dirname "$(dpkg -L rabbitmq-server | grep '/sbin/rabbitmq-server$' | grep rabbitmq_server- | head -1)")
[ -x "$RMQ_SBIN/rabbitmq-server" ] || { echo "rabbitmq-server script not found" >&2; exit 1; }

# --- nats-server from the Go module proxy (Debian's 2.9 has no sync_interval)
NATS_BIN=$PEERS_DIR/bin/nats-server
if ! "$NATS_BIN" --version 2>/dev/null | grep -q "${NATS_VERSION#v}"; then
	echo "== go install nats-server $NATS_VERSION" >&2
	(cd "$PEERS_DIR" && GOFLAGS=-mod=mod GOBIN="$PEERS_DIR/bin" go install "github.com/nats-io/nats-server/v2@$NATS_VERSION")
fi

# --- the ports must be free: the harness kills only what it started.
for p in 25673 25674 24369 14222 14223 25800 25801; do
	if ss -Hltn "sport = :$p" | grep -q .; then
		echo "port $p is in use; stop whatever listens there first" >&2
		exit 1
	fi
done

echo "== busbar-bench (results in $OUT)" >&2
go run ./cmd/busbar-bench -repo .. -work "$WORK" -out "$OUT" \
	-rabbitmq-sbin "$RMQ_SBIN" -nats-server "$NATS_BIN" "$@"
echo "== wrote $OUT/results.md and $OUT/results.csv" >&2
