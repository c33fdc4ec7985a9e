#!/usr/bin/env bash
# Profiles Busbar under one benchmark cell without touching broker code:
# builds cmd/busbar-pprof (internal/server + net/http/pprof, mutex and block
# profiling on) from a commit, runs busbar-bench against it, and saves CPU,
# heap-allocation, mutex and block profiles taken while the cell runs.
#
#   bench/profile.sh NAME [busbar-bench flags...]
#   bench/profile.sh w1 -workloads W1 -w1-cells 4x64 -sizes none -w1-dur 25s
#   bench/profile.sh w2 -workloads W2 -w2-cells 4x200
#
# Env: REV (commit, default HEAD), SRC (a directory to build from as it is
# on disk instead, e.g. SRC=.. for the work tree), OUT (default /tmp/busbar-profiles),
# DELAY (seconds before sampling, default 6), SECONDS_CPU (default 10).
set -euo pipefail
cd "$(dirname "$0")"
name=$1
shift
REV=${REV:-HEAD}
OUT=${OUT:-/tmp/busbar-profiles}
DELAY=${DELAY:-6}
SECONDS_CPU=${SECONDS_CPU:-10}
PPROF=127.0.0.1:6061
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
if [ -n "${SRC:-}" ]; then
	(cd "$SRC" && tar -c --exclude=.git .) | tar -x -C "$src"
else
	git -C .. archive "$REV" | tar -x -C "$src"
fi
mkdir -p "$src/cmd/busbar-pprof" "$OUT"
cp cmd/busbar-pprof/main.go "$src/cmd/busbar-pprof/"
(cd "$src" && go build -o "$OUT/busbar-pprof" ./cmd/busbar-pprof)

BUSBAR_PPROF=$PPROF go run ./cmd/busbar-bench -busbar-bin "$OUT/busbar-pprof" -targets busbar -limits 0 \
	-work "$OUT/work-$name" -out "$OUT/$name" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" &
bench=$!
sleep "$DELAY"
curl -s -o "$OUT/$name.cpu.pprof" "http://$PPROF/debug/pprof/profile?seconds=$SECONDS_CPU" &
cpu=$!
sleep $((SECONDS_CPU / 2))
curl -s -o "$OUT/$name.allocs.pprof" "http://$PPROF/debug/pprof/allocs"
curl -s -o "$OUT/$name.mutex.pprof" "http://$PPROF/debug/pprof/mutex"
curl -s -o "$OUT/$name.block.pprof" "http://$PPROF/debug/pprof/block"
curl -s -o "$OUT/$name.goroutine.txt" "http://$PPROF/debug/pprof/goroutine?debug=1"
wait $cpu || true
wait $bench || true
for p in cpu mutex block; do
	go tool pprof -top -nodecount=40 "$OUT/busbar-pprof" "$OUT/$name.$p.pprof" >"$OUT/$name.$p.top" 2>&1 || true
	go tool pprof -top -cum -nodecount=40 "$OUT/busbar-pprof" "$OUT/$name.$p.pprof" >"$OUT/$name.$p.cum.top" 2>&1 || true
done
go tool pprof -top -sample_index=alloc_space -nodecount=40 "$OUT/busbar-pprof" "$OUT/$name.allocs.pprof" >"$OUT/$name.allocs.top" 2>&1 || true
echo "profiles in $OUT/$name.*; results in $OUT/$name/results.md"
