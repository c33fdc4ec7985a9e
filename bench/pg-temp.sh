#!/bin/sh
# A throw-away PostgreSQL for the busbar-postgres benchmark target.
#
#   bench/pg-temp.sh start DIR   initdb in DIR (new), start on a free loopback port, print the URL
#   bench/pg-temp.sh stop DIR    stop it (by the postmaster's PID) and remove DIR
#
# Needs Debian's postgresql package. As root, the server runs as the user
# postgres (initdb refuses root). Settings: fsync and synchronous_commit on
# (PostgreSQL's defaults: a commit returns after its WAL flush).
set -eu
cmd=${1:?start or stop}
dir=${2:?directory}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$bin/initdb" ] || { echo "no PostgreSQL binaries: apt-get install postgresql" >&2; exit 1; }
as() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case $cmd in
start)
	mkdir "$dir"
	[ "$(id -u)" = 0 ] && chown postgres "$dir"
	as "$bin/initdb" -D "$dir/data" -U busbar --auth=trust -E UTF8 --locale=C >/dev/null
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	as "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c shared_buffers=256MB -c max_connections=100" start >/dev/null
	as "$bin/createdb" -h 127.0.0.1 -p "$port" -U busbar busbar
	echo "postgres://busbar@127.0.0.1:$port/busbar?sslmode=disable"
	;;
stop)
	pid=$(head -1 "$dir/data/postmaster.pid")
	kill -INT "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	rm -rf "$dir"
	;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
