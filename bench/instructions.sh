#!/bin/bash
# Instructions a request costs the server, counted by callgrind (repeatable,
# whatever else the machine is doing): kurad on the in-memory cache with one
# worker, N requests of kura-bench (pipeline 16, 1:9 sets to gets, 1,000
# keys, a fixed seed) in each protocol, minus a run with no requests (the
# start and stop), divided by N.  Give several build directories to compare
# them in one run (an older tree built elsewhere, then this one).  -d hash
# (or tree) runs kurad on a fresh hash file (B+ tree) in a temporary
# directory instead of the cache; -p PROTOS limits the protocols.
#
#   bench/instructions.sh [-n N] [-d hash|tree] [-p "text meta"] [BUILD ...]
set -euo pipefail
cd "$(dirname "$0")/.."
n=40000
db=
protos="text meta binary"
while [ $# -gt 0 ]; do
    case "$1" in
    -n) n=$2; shift 2 ;;
    -d) db=$2; shift 2 ;;
    -p) protos=$2; shift 2 ;;
    *) break ;;
    esac
done
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
    local dir="" spec='*'
    if [ -n "$db" ]; then
        dir=$(mktemp -d)
        case "$db" in hash) spec=$dir/x.kh ;; tree) spec=$dir/x.kb ;; *) spec=$db ;; esac
    fi
    valgrind --tool=callgrind --callgrind-out-file="$out" "$1/kurad" "${user[@]}" -p "$port" \
        -t 1 "$spec" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 300); do (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
    if [ "$3" -gt 0 ]; then
        "$bench" -p "$port" -t 1 -c 1 -P 16 -n "$3" -k 1000 --seed 7 --proto "$2" -r 1:9 -q \
            >/dev/null
    fi
    kill -TERM "$pid"; wait "$pid" || true
    awk '/^(summary|totals):/ { print $2; exit }' "$out"
    rm -f "$out"
    [ -z "$dir" ] || rm -rf "$dir"
}

printf '%-8s %-40s %12s\n' protocol build instr/request
for proto in $protos; do
    for b in "$@"; do
        base=$(count "$b" "$proto" 0)
        full=$(count "$b" "$proto" "$n")
        printf '%-8s %-40s %12d\n' "$proto" "$b" $(( (full - base) / n ))
    done
done
