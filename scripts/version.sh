#!/usr/bin/env bash
# version.sh prints leafmq's version, always SemVer (the NATS micro service
# refuses anything else): the release tag vX.Y.Z without its v when HEAD is
# one, else 0.0.0-dev+<commit> (with .dirty for uncommitted changes), else
# 0.0.0-dev where there is no git (a docker build context).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! git rev-parse --git-dir >/dev/null 2>&1; then
	echo 0.0.0-dev
	exit 0
fi
if tag=$(git describe --tags --exact-match 2>/dev/null) && [[ $tag =~ ^v?([0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)$ ]]; then
	echo "${BASH_REMATCH[1]}"
	exit 0
fi
v="0.0.0-dev+$(git rev-parse --short=12 HEAD)"
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	v="$v.dirty"
fi
echo "$v"
