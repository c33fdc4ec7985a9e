#!/usr/bin/env bash
# release_check.sh: builds a release for two platforms with release.sh
# into a temporary copy of dist/ and checks it: the archives' checksums,
# their contents, and that the linux/amd64 binary's `busbar version` names
# the version and the revision it was built from. Prints
# "release check: N passed, N failed" last.
set -euo pipefail
cd "$(dirname "$0")/.."

version=v0.0.0-check.$$
revision=$(git rev-parse --short=12 HEAD) # before the build: HEAD may move meanwhile
rm -rf "dist/$version"
trap 'rm -rf "dist/$version" "$tmp"' EXIT
tmp=$(mktemp -d)
TARGETS="linux/amd64 windows/arm64" build/release.sh "$version" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }

passed=0
failed=0
check() {
	local name=$1
	shift
	if "$@"; then echo "ok    $name"; passed=$((passed + 1)); else echo "FAIL  $name"; failed=$((failed + 1)); fi
}
out=dist/$version
check "SHA256SUMS verifies both archives" bash -c "cd '$out' && sha256sum -c --quiet SHA256SUMS && [ \$(wc -l <SHA256SUMS) -eq 2 ]"
check "linux archive holds busbar, LICENSE, README.md" bash -c "tar -tzf '$out/busbar_${version}_linux_amd64.tar.gz' | sort | tr '\n' ' ' | grep -q 'busbar_${version}_linux_amd64/LICENSE busbar_${version}_linux_amd64/README.md busbar_${version}_linux_amd64/busbar'"
check "windows archive holds busbar.exe" bash -c "python3 -c 'import sys,zipfile; sys.exit(\"busbar_${version}_windows_arm64/busbar.exe\" not in zipfile.ZipFile(sys.argv[1]).namelist())' '$out/busbar_${version}_windows_arm64.zip'"
tar -xzf "$out/busbar_${version}_linux_amd64.tar.gz" -C "$tmp"
got=$("$tmp/busbar_${version}_linux_amd64/busbar" version 2>&1 || true)
echo "busbar version: $got"
check "busbar version names the version" grep -qF -- "$version" <<<"$got"
check "busbar version names the revision" grep -qF -- "$revision" <<<"$got"
check "the binary is static" bash -c "! readelf -l '$tmp/busbar_${version}_linux_amd64/busbar' | grep -q INTERP"
echo "release check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
