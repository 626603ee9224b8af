#!/usr/bin/env bash
# make model: model-check the protocols of docs/protocol.md with Spin
# (model/*.pml). Every interleaving of each model is explored; a run is one
# model with one set of -D flags:
#   pass       the model as the code is: must end with "errors: 0", the
#              search completed
#   bug        a guard removed (BUG_*): must print a counterexample (a trail)
#   redundant  a check removed that the model shows protects nothing: must
#              pass (docs/protocol.md lists it)
#   gap        a known gap of the protocol (GAP_*, docs/protocol.md): must
#              print a counterexample, so the gap stays written down
# It prints the states stored and the time of each run and fails if any run
# does not end as expected. Installs spin (Debian package) if missing; works
# in a temporary directory and leaves nothing in the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
SCRIPT=model.sh
# shellcheck source=scripts/lib.sh
. ./scripts/lib.sh
command -v spin >/dev/null 2>&1 || apt_install spin
command -v cc >/dev/null 2>&1 || apt_install gcc

work=$(mktemp -d /tmp/leafmq-model.XXXXXX)
trap 'rm -rf "$work"' EXIT

W1="-DTMAX=2 -DMAXTOK=2 -DMAXCRASH=1 -DMAXOPS=0"
W2="-DTMAX=2 -DMAXTOK=2 -DMAXCRASH=0 -DMAXOPS=1"
W0="-DTMAX=2 -DMAXTOK=2 -DMAXCRASH=0 -DMAXOPS=0"
S1="-DMAXID=5"
S2="-DOP_REPLACE -DMAXID=7"
S3="-DOP_LOWER2 -DMAXID=7"
M1="-DTMAX=3 -DMAXID=5 -DMAXG=2"
M2="-DTMAX=3 -DMAXID=7 -DMAXG=3 -DMAXCRASH=0 -DMAXOPS=0"

# model | expect | flags
runs=(
	"worker|pass|$W1"
	"worker|pass|$W2"
	"worker|bug|$W0 -DBUG_NO_FENCE"
	"worker|bug|$W0 -DBUG_NO_WAIT"
	"worker|redundant|$W1 -DNO_CLAIM_TTL"
	"segment|pass|$S1"
	"segment|pass|$S2"
	"segment|pass|$S3"
	"segment|bug|$S3 -DBUG_NO_FLOOR"
	"segment|bug|$S2 -DBUG_NO_CREATECHECK"
	"segment|bug|$S1 -DBUG_NO_HANDBACK_CAS"
	"segment|bug|$S2 -DBUG_NO_INCARNATION_AFTER"
	"segment|gap|$S3 -DGAP_LOWER2_INFLIGHT"
	"mono|pass|$M1"
	"mono|bug|$M1 -DBUG_NO_FENCE"
	"mono|bug|$M1 -DBUG_NO_WAIT"
	"mono|bug|$M2 -DBUG_NO_GEN"
	"mono|redundant|$M1 -DNO_BEGAN_CHECK"
)

only=${1:-}
# run_one checks one run and writes its line of the table to $d/line (and
# the reason to $d/failed when it did not end as expected).
run_one() {
	local d=$1 model=$2 expect=$3 flags=$4
	cp "model/$model.pml" "$d/"
	# shellcheck disable=SC2086 # flags are words
	if ! (cd "$d" && spin $flags -a "$model.pml" >spin.out 2>&1 &&
		cc -O2 -DSAFETY -DCOLLAPSE -DMEMLIM=4096 -o pan pan.c >cc.out 2>&1); then
		{
			echo "$model ($flags): spin or cc failed:"
			cat "$d/spin.out" "$d/cc.out" 2>/dev/null || true
		} >"$d/failed"
		printf '%-8s %-10s %-60s %9s %7s  %s\n' "$model" "$expect" "$flags" "?" "?" "FAIL: spin or cc" >"$d/line"
		return
	fi
	# -E: a model's processes wait at the end of its horizon (time, ids,
	# grants); that is not a deadlock.
	(cd "$d" && ./pan -E -m200000 >pan.out 2>&1) || true
	local out="$d/pan.out" states secs errors result=ok
	states=$(awk '/states, stored/ {print $1; exit}' "$out")
	secs=$(awk '/elapsed time/ {print $4; exit}' "$out")
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | head -1)
	case "$expect" in
	pass | redundant)
		if [ "${errors:-x}" != 0 ] || grep -q 'Search not completed' "$out"; then
			result="FAIL: expected errors: 0 and a complete search"
		fi
		;;
	bug | gap)
		if [ "${errors:-0}" = 0 ] || [ ! -f "$d/$model.pml.trail" ]; then
			result="FAIL: expected a counterexample"
		else
			result="ok: $(grep -m1 -o 'assertion violated.*' "$out" | cut -c1-40)"
		fi
		;;
	esac
	printf '%-8s %-10s %-60s %9s %7s  %s\n' "$model" "$expect" "$flags" "${states:-?}" "${secs:-?}" "$result" >"$d/line"
	if [ "${result#FAIL}" != "$result" ]; then
		tail -20 "$out" >"$d/failed"
	fi
}

# The runs are independent: as many at a time as there are cores.
jobs=$(nproc)
failed=0
total_start=$(date +%s.%N)
dirs=()
i=0
for r in "${runs[@]}"; do
	IFS='|' read -r model expect flags <<<"$r"
	[ -z "$only" ] || [ "$only" = "$model" ] || continue
	i=$((i + 1))
	d="$work/$i.$model"
	mkdir -p "$d"
	dirs+=("$d")
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n || true
	done
	run_one "$d" "$model" "$expect" "$flags" &
done
wait
printf '%-8s %-10s %-60s %9s %7s  %s\n' model expect flags states seconds result
for d in "${dirs[@]}"; do
	cat "$d/line"
	if [ -f "$d/failed" ]; then
		failed=1
		cat "$d/failed" >&2
	fi
done
total=$(echo "$(date +%s.%N) - $total_start" | bc 2>/dev/null || echo "?")
echo "model: $(nproc) cores, ${total}s in all (spin $(spin -V | awk '{print $3}'))"
if [ "$failed" -ne 0 ]; then
	echo "model: FAILED" >&2
	exit 1
fi
echo "model: every run ended as expected"
