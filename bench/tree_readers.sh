#!/bin/bash
# tree_readers.sh - the B+ tree's gets with one worker thread and with two
# (issue 23, item 5: with `-th 2` and two client threads, tree gets are to
# reach 1.7 times `-th 1`).
#
#   bench/tree_readers.sh [-b BUILD]... [-r RUNS] [-v VALUE_SIZE] [-d SECONDS]
#
# For each build directory (default: build; name more with -b, e.g. the
# previous commit's, to compare in the same run) and each repetition:
# a fresh `kurad -th T DIR/bench.kb` for T = 1 and 2, loaded with KEYS
# values of VALUE_SIZE bytes, then `kura-bench -t 2 -c 4 -r 0:1 --verify`
# gets for SECONDS.  Prints one line per run (build, T, gets/s) and, per
# build, the median of -th 2 over the median of -th 1.  Nothing is pinned:
# on a 2-core machine the servers and the client share the cores.
set -u
BUILDS=()
RUNS=3 VSIZE=20000 SECS=6 KEYS=4000
while getopts "b:r:v:d:" o; do
    case $o in
    b) BUILDS+=("$OPTARG") ;;
    r) RUNS=$OPTARG ;;
    v) VSIZE=$OPTARG ;;
    d) SECS=$OPTARG ;;
    *) echo "usage: $0 [-b BUILD]... [-r RUNS] [-v VALUE_SIZE] [-d SECONDS]" >&2; exit 2 ;;
    esac
done
[ ${#BUILDS[@]} -eq 0 ] && BUILDS=(build)
BENCH=${BUILDS[0]}/kura-bench

free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# one run: prints gets/s, or nothing if the server did not come up
one() {
    local kurad=$1 th=$2 port dir pid rate
    port=$(free_port)
    dir=$(mktemp -d /tmp/tree-readers.XXXXXX)
    "$kurad" -port "$port" -th "$th" -m 1024 $( [ "$(id -u)" = 0 ] && echo -u root ) \
        "$dir/bench.kb" >/dev/null 2>&1 &
    pid=$!
    local deadline=$((SECONDS + 20))
    until "$BENCH" -p "$port" -t 1 -c 1 -n 1 -r 0:1 -q >/dev/null 2>&1; do
        if [ $SECONDS -ge $deadline ] || ! kill -0 $pid 2>/dev/null; then
            kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"; return
        fi
    done
    "$BENCH" -p "$port" -t 2 -c 4 -v "$VSIZE" -k "$KEYS" -r 1:0 -n "$KEYS" -q >/dev/null 2>&1
    rate=$("$BENCH" -p "$port" -t 2 -c 4 -v "$VSIZE" -k "$KEYS" -r 0:1 -d "$SECS" --verify 2>&1 |
           awk '/ops\/s/ { print $1; exit }')
    kill $pid; wait $pid 2>/dev/null
    rm -rf "$dir"
    echo "$rate"
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }

declare -A got
for ((r = 1; r <= RUNS; r++)); do
    for b in "${BUILDS[@]}"; do
        for th in 1 2; do
            rate=$(one "$b/kurad" $th)
            echo "$b -th $th: ${rate:-failed} gets/s"
            [ -n "$rate" ] && got[$b.$th]+="$rate "
        done
    done
done
status=0
for b in "${BUILDS[@]}"; do
    m1=$(echo ${got[$b.1]:-} | tr ' ' '\n' | median)
    m2=$(echo ${got[$b.2]:-} | tr ' ' '\n' | median)
    if [ -z "$m1" ] || [ -z "$m2" ]; then
        echo "$b: no result"; status=1; continue
    fi
    echo "$b: median -th 1 $m1, -th 2 $m2 gets/s, ratio $(awk -v a="$m2" -v b="$m1" 'BEGIN { printf "%.2f", a / b }')"
done
exit $status
