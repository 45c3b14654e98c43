#!/bin/bash
# Instructions a request costs the server, counted by callgrind (repeatable,
# whatever else the machine is doing): kurad on the in-memory cache with one
# worker, N requests of kura-bench (pipeline 16, 1:9 sets to gets, 1,000
# keys, a fixed seed) in each protocol, minus a run with no requests (the
# start and stop), divided by N.  Give several build directories to compare
# them in one run (an older tree built elsewhere, then this one).
#
#   bench/instructions.sh [-n N] [BUILD ...]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
n=40000
if [ "${1:-}" = -n ]; then n=$2; shift 2; fi
[ $# -gt 0 ] || set -- build
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 2; }
bench=build/kura-bench
[ -x "$bench" ] || { echo "build $bench first (make)" >&2; exit 2; }
user=(); [ "$(id -u)" = 0 ] && user=(-u root)

# total instructions of a kurad run serving $3 requests of protocol $2
count() {
    local port out pid
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    out=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file="$out" "$1/kurad" "${user[@]}" -p "$port" \
        -t 1 '*' >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 300); do (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
    if [ "$3" -gt 0 ]; then
        "$bench" -p "$port" -t 1 -c 1 -P 16 -n "$3" -k 1000 --seed 7 --proto "$2" -r 1:9 -q \
            >/dev/null
    fi
    kill -TERM "$pid"; wait "$pid" || true
    awk '/^(summary|totals):/ { print $2; exit }' "$out"
    rm -f "$out"
}

printf '%-8s %-40s %12s\n' protocol build instr/request
for proto in text meta binary; do
    for b in "$@"; do
        base=$(count "$b" "$proto" 0)
        full=$(count "$b" "$proto" "$n")
        printf '%-8s %-40s %12d\n' "$proto" "$b" $(( (full - base) / n ))
    done
done
