#!/bin/sh
# rootfs.sh OUT BINARY: lays out the container image's file system from a
# statically linked busbar BINARY: OUT/root is copied into the image as
# root's, OUT/user as the busbar user's (65532). Both image recipes use it: the
# user-facing Dockerfile in its build stage, build/image/build.sh on the
# host. The image is FROM scratch, so everything it holds is here:
#
#   /busbar                             the binary (entrypoint)
#   /data/                              the store (a volume), the busbar user's
#   /config/                            where Busbar's own Config.json may be mounted
#   /ServiceBus_Emulator/ConfigFiles/   where the emulator's compose file mounts it
#   /etc/passwd, /etc/group             the busbar user and group (65532)
#   /etc/ssl/certs/ca-certificates.crt  public CAs (for OpenID Connect issuers)
#   /tmp/                               world-writable, sticky
set -eu
user=$1/user
out=$1/root
bin=$2
mkdir -p "$user/data"
chmod 0750 "$user/data"
mkdir -p "$out/config" "$out/ServiceBus_Emulator/ConfigFiles" "$out/etc/ssl/certs" "$out/tmp"
cp "$bin" "$out/busbar"
chmod 0755 "$out/busbar"
echo 'root:x:0:0:root:/:/sbin/nologin' >"$out/etc/passwd"
echo 'busbar:x:65532:65532:busbar:/data:/sbin/nologin' >>"$out/etc/passwd"
printf 'root:x:0:\nbusbar:x:65532:\n' >"$out/etc/group"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
	cp /etc/ssl/certs/ca-certificates.crt "$out/etc/ssl/certs/"
fi
chmod 1777 "$out/tmp"
