#!/usr/bin/env bash
# dist.sh OUTDIR PLATFORM... packs release archives as nats-server's are:
# for each binary and PLATFORM (os/arch), OUTDIR/NAME-vVERSION-OS-ARCH.tar.gz
# holding the folder NAME-vVERSION-OS-ARCH with the binary, LICENSE and
# README.md, and OUTDIR/SHA256SUMS over the archives (sha256sum -c checks
# them). The binaries come from build.sh, so VERSION is checked and stamped
# in one place. The archives hold no build machine's owner or times.
set -euo pipefail
out=${1:?usage: dist.sh OUTDIR PLATFORM...}
shift
[ $# -gt 0 ] || { echo "dist.sh: no PLATFORM (e.g. linux/amd64)" >&2; exit 2; }
cd "$(dirname "$0")/.."
VERSION=${VERSION:-$(scripts/version.sh)}
export VERSION
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# Every file of an archive gets the time of the commit (reproducible builds).
mtime=@$(git log -1 --format=%ct 2>/dev/null || echo 0)
for p in "$@"; do
	os=${p%/*} arch=${p#*/}
	GOOS=$os GOARCH=$arch scripts/build.sh "$stage/bin-$os-$arch"
	for bin in leafd leafctl; do
		name=$bin-v$VERSION-$os-$arch
		mkdir "$stage/$name"
		cp "$stage/bin-$os-$arch/$bin" LICENSE README.md "$stage/$name/"
		tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" \
			-cf - "$name" | gzip -n -9 > "$out/$name.tar.gz"
	done
done
cd "$out"
sha256sum -- *.tar.gz > SHA256SUMS
