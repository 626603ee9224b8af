#!/usr/bin/env bash
# Runs every fuzz target of the module (func FuzzXxx in a _test.go) for
# FUZZTIME each, one after the other; stops at the first failure, whose
# input go test keeps under the package's testdata/fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-30s}
targets=$(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(' . | sort)
n=0
for file in $targets; do
	pkg=./$(dirname "${file#./}")
	for fn in $(grep -oE '^func Fuzz[A-Za-z0-9_]+' "$file" | sed 's/^func //'); do
		echo "== $fn ($pkg, $FUZZTIME)"
		go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$FUZZTIME" "$pkg"
		n=$((n + 1))
	done
done
echo "fuzz: $n targets, $FUZZTIME each, no failure"
