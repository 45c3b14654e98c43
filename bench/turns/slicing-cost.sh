#!/bin/sh
# What slicing costs a listing itself, in instructions (callgrind: the
# count does not move with the machine's load, which CPU time does by
# +-15% on a shared machine).  For each listing: the instructions of
# kura-turnbench with it, sliced (as kurad runs it) and whole in one call
# (KURA_TEST_LIST_INLINE=1), less a run with no listing; then their ratio.
#
#     bench/turns/slicing-cost.sh [BUILD [ITEMS]]     (build-test, 50000)
#
# KURA_TEST_LIST_INLINE is read only by a test tree's code (testhooks.h):
# BUILD is one, e.g. make BUILD=build-test TEST_HOOKS=1 build-test/kura-turnbench
set -e
B=${1:-build-test}
N=${2:-50000}
count() {       # instructions of one kura-turnbench run
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$B/kura-turnbench" "$N" '*' 1 "$1" \
        2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
base=$(count -)
printf '%-44s %14s %14s %8s\n' listing sliced whole ratio
for req in "lru_crawler metadump all" "keys" "keys limit=100000" \
           "rget key:00000000 key:99999999 0 0 100000" "digest 256"; do
    s=$(count "$req")
    w=$(KURA_TEST_LIST_INLINE=1 count "$req")
    awk -v r="$req" -v s="$s" -v w="$w" -v b="$base" \
        'BEGIN { printf "%-44s %14d %14d %8.4f\n", r, s - b, w - b, (s - b) / (w - b) }'
done
