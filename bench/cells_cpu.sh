#!/bin/bash
# The server's CPU per small-value cell, build against build: kurad (-th 2,
# a fresh database of kind DB: hash, tree or cache) from each build in
# turn, three repetitions, each cell 200,000 requests of kura-bench; prints
# "build cell requests ops/s cpu-ticks" (utime + stime of kurad over the
# cell, /proc/PID/stat, ticks of 10 ms).  CPU, unlike ops/s, stays
# comparable while other work loads the machine.
#
#   bench/cells_cpu.sh [-d hash|tree|cache] OLD_BUILD NEW_BUILD
set -uo pipefail
cd "$(dirname "$0")/.."
db=hash
if [ "${1:-}" = -d ]; then db=$2; shift 2; fi
[ $# -eq 2 ] || { echo "usage: $0 [-d hash|tree|cache] OLD_BUILD NEW_BUILD" >&2; exit 2; }
bench=build/kura-bench
user=(); [ "$(id -u)" = 0 ] && user=(-u root)
cpu() { awk '{print $14 + $15}' /proc/"$pid"/stat; }
cell() {
    local label=$1; shift
    local c0 r c1
    c0=$(cpu)
    r=$("$bench" -p "$port" -q --csv "$@" 2>/dev/null | tail -1 | awk -F, '{print $16, $17}')
    c1=$(cpu)
    echo "$b $label $r $((c1 - c0))"
}
for rep in 1 2 3; do
    for b in "$1" "$2"; do
        dir=$(mktemp -d)
        case "$db" in hash) spec=$dir/x.kh ;; tree) spec=$dir/x.kb ;; *) spec='*' ;; esac
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        "$b/kurad" -host 127.0.0.1 -port "$port" -th 2 "${user[@]}" "$spec" >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 300); do "$bench" -p "$port" -q -n 1 >/dev/null 2>&1 && break; sleep 0.1; done
        cell sets1 -c 1 --ratio 1:0 --pattern seq --ops 200000 --keys 200000
        cell gets1 -c 1 --ratio 0:1 --pattern seq --ops 200000 --keys 200000
        cell miss1 -c 1 --ratio 0:1 --miss-ratio 1 --ops 200000
        cell gets20 -c 20 --ratio 0:1 --ops 200000 --keys 200000
        cell mix16 -c 16 --ratio 3:7 --keys 10000 --prefill --pattern uniform --ops 200000
        cell v100sets16 -c 16 -v 100 --ratio 1:0 --pattern seq --keys 200000 --ops 200000
        cell v100gets16 -c 16 -v 100 --ratio 0:1 --pattern uniform --keys 200000 --ops 200000
        kill -TERM "$pid"; wait "$pid"
        rm -rf "$dir"
    done
done
