#!/usr/bin/env bash
# build.sh [TAG]: builds Busbar's container image offline with buildah:
# a statically linked busbar for this machine's architecture, the file
# system of build/image/rootfs.sh, and build/image/Containerfile (FROM
# scratch). TAG defaults to localhost/busbar:dev.
#
# BUILDAH_ARGS adds global buildah options (check.sh keeps its images in a
# temporary store with them). Needs go and buildah (apt-get install
# buildah); builds as root or rootless.
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=${1:-localhost/busbar:dev}
read -r -a global <<<"${BUILDAH_ARGS:-}"

version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)

ctx=$(mktemp -d "${TMPDIR:-/tmp}/busbar-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
pkg=github.com/busbarmq/busbar/internal/version
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $pkg.version=$version -X $pkg.commit=$revision" -o "$ctx/busbar" ./cmd/busbar
sh build/image/rootfs.sh "$ctx/image" "$ctx/busbar"
cp build/image/Containerfile "$ctx/Containerfile"
buildah "${global[@]}" bud --quiet --format docker --isolation chroot \
	--build-arg VERSION="$version" --build-arg REVISION="$revision" \
	-t "$tag" -f "$ctx/Containerfile" "$ctx" >/dev/null
echo "built $tag ($version)"
