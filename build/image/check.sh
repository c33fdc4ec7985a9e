#!/usr/bin/env bash
# check.sh: builds the container image (build.sh) and checks it as far as
# this machine allows — it can build images offline but cannot run
# containers — so it:
#
#  1. checks that the Dockerfile's runtime part is the Containerfile's;
#  2. builds the image into a temporary buildah store;
#  3. checks its configuration: non-root user, entrypoint and command,
#     exposed ports, the /data volume, environment, labels, health check;
#  4. unpacks its layers and checks the file system (a static binary,
#     /data owned by the image's user);
#  5. runs the very binary the image holds, chrooted into the unpacked
#     file system as the image's user, with the image's entrypoint, command
#     and environment, in a network namespace of its own (so the image's
#     real ports, 5672 and 5300, clash with nothing on this machine), the
#     compose example's Config.json at the emulator's path; then runs the
#     health check command and the Go SDK quickstart against it, stops it
#     with SIGTERM and checks that it exited 0 and kept its data in /data.
#
# Needs root (chroot, unshare), go and buildah; installs buildah with
# apt-get when missing. Prints "image check: N passed, N failed" last.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ]; then
	echo "check.sh: needs root (chroot and a network namespace)" >&2
	exit 2
fi
if ! command -v buildah >/dev/null; then
	echo "== apt-get install buildah"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null ||
		{ apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null; }
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/busbar-image-check.XXXXXX")
server_pid=
cleanup() {
	if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
	buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs rmi --all >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
export BUILDAH_ARGS="--root $work/storage --runroot $work/run --storage-driver vfs"
read -r -a global <<<"$BUILDAH_ARGS"

passed=0
failed=0
check() { # check NAME CONDITION...
	local name=$1
	shift
	if "$@"; then
		echo "ok    $name"
		passed=$((passed + 1))
	else
		echo "FAIL  $name"
		failed=$((failed + 1))
	fi
}

# 1. The two recipes share their runtime part.
runtime_part() { sed -n '/^# -- runtime/,$p' "$1"; }
check "Dockerfile's runtime part is the Containerfile's" \
	diff <(runtime_part Dockerfile) <(runtime_part build/image/Containerfile)

# 2. Build.
tag=localhost/busbar:check
echo "== build"
build/image/build.sh "$tag"

# 3. Configuration.
buildah "${global[@]}" inspect --type image "$tag" |
	python3 -c 'import json,sys; json.dump(json.load(sys.stdin)["Docker"]["config"], sys.stdout)' >"$work/config.json"
py() { python3 - "$work/config.json" "$@"; }
check "config: user 65532:65532" py <<'PY'
import json, sys; c = json.load(open(sys.argv[1])); sys.exit(c.get("User") != "65532:65532")
PY
check "config: entrypoint /busbar, command serve" py <<'PY'
import json, sys; c = json.load(open(sys.argv[1])); sys.exit(not (c.get("Entrypoint") == ["/busbar"] and c.get("Cmd") == ["serve"]))
PY
check "config: ports 5672 5671 5300 5301" py <<'PY'
import json, sys; c = json.load(open(sys.argv[1]))
sys.exit(set(c.get("ExposedPorts") or {}) != {"5672/tcp", "5671/tcp", "5300/tcp", "5301/tcp"})
PY
check "config: volume /data" py <<'PY'
import json, sys; c = json.load(open(sys.argv[1])); sys.exit(set(c.get("Volumes") or {}) != {"/data"})
PY
check "config: environment (all interfaces, /data, both Config.json paths)" py <<'PY'
import json, sys; c = json.load(open(sys.argv[1])); env = dict(e.split("=", 1) for e in c.get("Env") or [])
want = {"BUSBAR_DATA": "/data", "BUSBAR_AMQP": "0.0.0.0:5672", "BUSBAR_HTTP": "0.0.0.0:5300",
        "BUSBAR_AMQPS": "0.0.0.0:5671", "BUSBAR_HTTPS": "0.0.0.0:5301",
        "BUSBAR_CONFIG_SEARCH": "/config/Config.json:/ServiceBus_Emulator/ConfigFiles/Config.json"}
sys.exit(any(env.get(k) != v for k, v in want.items()))
PY
check "config: OCI labels (title, source, licenses, version, revision)" py <<'PY'
import json, sys; c = json.load(open(sys.argv[1])); l = c.get("Labels") or {}
keys = ["org.opencontainers.image." + k for k in ("title", "source", "licenses", "version", "revision")]
sys.exit(any(not l.get(k) or l.get(k) in ("dev", "unknown") and k.endswith("revision") for k in keys))
PY
check "config: health check runs busbar health" py <<'PY'
import json, sys; c = json.load(open(sys.argv[1])); h = c.get("Healthcheck") or {}
sys.exit(h.get("Test") != ["CMD", "/busbar", "health"])
PY

# 4. The file system, from the image's own layers.
echo "== unpack"
buildah "${global[@]}" push --quiet "$tag" "oci:$work/oci" >/dev/null
rootfs=$work/rootfs
mkdir -p "$rootfs"
python3 - "$work/oci" >"$work/layers" <<'PY'
import json, sys, os
d = sys.argv[1]
idx = json.load(open(os.path.join(d, "index.json")))
digest = idx["manifests"][0]["digest"].split(":", 1)[1]
man = json.load(open(os.path.join(d, "blobs", "sha256", digest)))
for l in man["layers"]:
    print(os.path.join(d, "blobs", "sha256", l["digest"].split(":", 1)[1]))
PY
while read -r layer; do tar --same-owner -xf "$layer" -C "$rootfs"; done <"$work/layers"
check "rootfs: /busbar is a statically linked executable" bash -c "[ -x '$rootfs/busbar' ] && ! readelf -l '$rootfs/busbar' | grep -q INTERP"
check "rootfs: busbar version names the image's version label" bash -c "'$rootfs/busbar' version | grep -qF \"\$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"Labels\"][\"org.opencontainers.image.version\"])' '$work/config.json')\""
check "rootfs: /data owned by 65532" bash -c "[ \"\$(stat -c %u:%g '$rootfs/data')\" = 65532:65532 ]"

# 5. Run what the image runs.
echo "== run the image's binary (chroot, own network namespace)"
# The compose example's Config.json, where the emulator's compose file mounts it.
cp examples/compose/Config.json "$rootfs/ServiceBus_Emulator/ConfigFiles/Config.json"
go build -o "$work/quickstart" ./examples/quickstart
mapfile -t image_env < <(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1])).get("Env") or []))' "$work/config.json")
cat >"$work/inside.sh" <<SH
set -u
ip link set lo up
env -i ${image_env[*]@Q} chroot --userspec=65532:65532 "$rootfs" /busbar serve >"$work/server.log" 2>&1 &
pid=\$!
healthy=1
for i in \$(seq 1 100); do
	if env -i ${image_env[*]@Q} chroot --userspec=65532:65532 "$rootfs" /busbar health >/dev/null 2>&1; then healthy=0; break; fi
	sleep 0.1
done
echo "health: \$healthy"
"$work/quickstart" >"$work/quickstart.log" 2>&1
echo "quickstart: \$?"
kill -TERM \$pid
wait \$pid
echo "serve exit: \$?"
SH
unshare --net bash "$work/inside.sh" >"$work/inside.log" 2>&1 || true
cat "$work/inside.log"
check "run: busbar health reports healthy" grep -qx "health: 0" "$work/inside.log"
check "run: the Go SDK quickstart sends, receives and completes" grep -qx "quickstart: 0" "$work/inside.log"
check "run: the emulator's Config.json was loaded" grep -q "ServiceBus_Emulator/ConfigFiles/Config.json" "$work/server.log"
check "run: SIGTERM exits 0" grep -qx "serve exit: 0" "$work/inside.log"
check "run: the store is in /data" bash -c "[ -n \"\$(ls -A '$rootfs/data')\" ]"
if [ "$failed" -ne 0 ]; then
	echo "--- server log"; cat "$work/server.log"
	echo "--- quickstart log"; cat "$work/quickstart.log"
fi
echo "image check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
