#!/usr/bin/env bash
# make test: everything the tests need, then every test. Works on a fresh
# Debian 12 machine (installs MariaDB and ZooKeeper with apt-get) and on a warm one.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local

work=$(mktemp -d /tmp/leafmq-test.XXXXXX)
cleanup() {
	./scripts/zookeeper.sh stop "$work/zookeeper" >/dev/null 2>&1 || true
	./scripts/mariadb.sh stop "$work/mariadb" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "== lint"
make --no-print-directory lint

echo "== model (Spin: the protocols of docs/protocol.md; planted bugs must give counterexamples)"
./scripts/model.sh

echo "== MariaDB"
./scripts/mariadb.sh start "$work/mariadb"
# shellcheck disable=SC1091
source "$work/mariadb/env"

echo "== ZooKeeper"
./scripts/zookeeper.sh start "$work/zookeeper"
# shellcheck disable=SC1091
source "$work/zookeeper/env"

echo "== Prometheus (promtool and prometheus for deploy/ and node/ tests)"
SCRIPT=test.sh
# shellcheck source=scripts/lib.sh
. ./scripts/lib.sh
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
	apt_install prometheus
fi
echo "== strace (node/: every reservation of the embedded store is fsynced)"
command -v strace >/dev/null 2>&1 || apt_install strace
echo "== Node.js, npm, nats.c (docs/: the client programs of docs/clients.md; npm packages go to a temp dir)"
{ command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; } || apt_install npm
command -v pkg-config >/dev/null 2>&1 || apt_install pkg-config
pkg-config --exists libnats 2>/dev/null || apt_install libnats-dev
echo "== Chromium (status page tests)"
command -v chromium >/dev/null 2>&1 || apt_install chromium
LEAF_TEST_CHROMIUM=$(command -v chromium)
export LEAF_TEST_CHROMIUM
export LEAF_TEST_REQUIRE=1

echo "== go test -race"
untracked_before=$(git ls-files --others --exclude-standard 2>/dev/null | sort)
set +e
# -parallel 8: node/'s tests mostly wait (TTLs, leases, clocks behind) and
# run in parallel (t.Parallel); 8 at a time keep the two cores busy. -p 3:
# three packages at a time, for the same reason (the go default is one a
# core). The longest packages are named first so that they start first
# (go test starts packages in the order given): node/ alone takes 5
# minutes, and started after the others (the order of ./...) it ran last,
# alone, for 3 of them: make test took 8m47s on 2 cores, 7m02s now.
long="./node ./cmd/leafchaos/internal/chaos ./cmd/leafctl ./deploy"
# shellcheck disable=SC2086
go test -race -count=1 -p "${TEST_P:-3}" -parallel "${TEST_PARALLEL:-8}" -timeout "${TEST_TIMEOUT:-20m}" $long ./... 2>&1 | tee "$work/test.log"
rc=${PIPESTATUS[0]}
set -e
passed=$(grep -c '^ok ' "$work/test.log" || true)
failed=$(grep -c '^FAIL'$'\t' "$work/test.log" || true)
echo "packages: $passed passed, $failed failed"
# Tests write under temp dirs only: a file they leave in the tree (a node
# started on the default ./data, say) is a bug.
left=$(comm -13 <(echo "$untracked_before") <(git ls-files --others --exclude-standard 2>/dev/null | sort))
if [ -n "$left" ]; then
	echo "tests left files in the tree:" >&2
	echo "$left" >&2
	rc=1
fi
exit "$rc"
