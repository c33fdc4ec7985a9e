#!/usr/bin/env bash
# release.sh [VERSION]: builds Busbar's release binaries into dist/VERSION/:
# one archive per platform (linux, darwin, windows × amd64, arm64; .tar.gz,
# .zip for windows), each holding busbar (busbar.exe), LICENSE and
# README.md, plus SHA256SUMS over the archives. The version and the git
# revision are embedded, so `busbar version` names them.
#
#   build/release.sh v0.3.0
#   TARGETS="linux/amd64 windows/arm64" build/release.sh v0.3.0-rc1
#
# VERSION defaults to `git describe --tags --always --dirty`. Binaries are
# static (CGO_ENABLED=0) and reproducible for a given tree and Go release
# (-trimpath, no build ID).
set -euo pipefail
cd "$(dirname "$0")/.."

version=${1:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
case $version in
*/* | *' '* | '') echo "release.sh: bad version '$version'" >&2; exit 2 ;;
esac
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then
	echo "release.sh: warning: the work tree has uncommitted changes" >&2
fi
targets=${TARGETS:-"linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"}
pkg=github.com/busbarmq/busbar/internal/version
ldflags="-s -w -buildid= -X $pkg.version=$version -X $pkg.commit=$commit"

out=dist/$version
rm -rf "$out"
mkdir -p "$out"
stage=$(mktemp -d "${TMPDIR:-/tmp}/busbar-release.XXXXXX")
trap 'rm -rf "$stage"' EXIT

for t in $targets; do
	os=${t%/*}
	arch=${t#*/}
	name=busbar_${version}_${os}_${arch}
	exe=busbar
	[ "$os" = windows ] && exe=busbar.exe
	mkdir -p "$stage/$name"
	echo "== $os/$arch"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$stage/$name/$exe" ./cmd/busbar
	cp LICENSE README.md "$stage/$name/"
	if [ "$os" = windows ]; then
		(cd "$stage" && python3 -c 'import sys, zipfile, os
name = sys.argv[1]
with zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED) as z:
    for f in sorted(os.listdir(name)):
        z.write(os.path.join(name, f))' "$name" "$name.zip")
		mv "$stage/$name.zip" "$out/"
	else
		tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -czf "$out/$name.tar.gz" "$name"
	fi
done
(cd "$out" && shopt -s nullglob && sha256sum -- *.tar.gz *.zip >SHA256SUMS)
echo "release $version ($commit) in $out:"
cat "$out/SHA256SUMS"
