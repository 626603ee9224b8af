#!/usr/bin/env bash
# build.sh OUTDIR builds leafd and leafctl into OUTDIR, stamped with VERSION
# (default: scripts/version.sh) and REVISION (default: the git commit, else
# "unknown"). GOOS and GOARCH pick the platform. The Makefile (build, dist)
# and deploy/Dockerfile all build through it: one place decides the version.
set -euo pipefail
out=${1:?usage: build.sh OUTDIR}
cd "$(dirname "$0")/.."
VERSION=${VERSION:-$(scripts/version.sh)}
REVISION=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
semver='^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$'
if ! [[ $VERSION =~ $semver ]]; then
	echo "build.sh: VERSION=$VERSION is not SemVer (e.g. 1.2.3 or 0.0.0-dev+abc123); leafd would refuse to start" >&2
	exit 2
fi
pkg=github.com/leafmq/leafmq/internal/buildinfo
ldflags="-s -w -X $pkg.Version=$VERSION -X $pkg.Revision=$REVISION"
mkdir -p "$out"
for cmd in leafd leafctl; do
	CGO_ENABLED=${CGO_ENABLED:-0} go build -trimpath -ldflags "$ldflags" -o "$out/$cmd${SUFFIX:-}" "./cmd/$cmd"
done
