#!/bin/bash
# kuractl import from a Kyoto Cabinet hash file: N records (key "key%08d",
# a 100-byte value) written by kchashmgr import, then imported into a new
# kura hash file and B+ tree, the verification pass timed apart
# (--no-verify, then a run with it).  Prints wall and CPU seconds and
# records/s of each; CPU time is the steadier figure on a shared machine.
#
#   bench/import.sh [-n N] [DIR]      (default N=1000000, DIR a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
n=1000000
if [ "${1:-}" = -n ]; then n=$2; shift 2; fi
dir=${1:-$(mktemp -d)}
ctl=build/kuractl
command -v kchashmgr >/dev/null || { echo "needs kchashmgr (apt-get install kyotocabinet-utils)" >&2; exit 2; }
[ -x "$ctl" ] || { echo "build $ctl first (make)" >&2; exit 2; }
python3 -c "
import sys
with open('$dir/in.tsv', 'w') as f:
    for i in range($n):
        f.write('key%08d\tvalue-%08d-%s\n' % (i, i, 'x' * 84))"
rm -f "$dir/src.kch"
kchashmgr import "$dir/src.kch" "$dir/in.tsv" >/dev/null
rm -f "$dir/in.tsv"
run() {     # label, then kuractl's arguments
    local label=$1 t
    shift
    /usr/bin/time -o "$dir/time" -f "%e %U %S" "$ctl" -q "$@" >/dev/null
    t=$(tail -1 "$dir/time")
    python3 -c "
w, u, s = map(float, '$t'.split()); n = $n
print('%-28s %6.2f s wall %8.0f rec/s   %6.2f s cpu %8.0f rec/s' % ('$label', w, n / w, u + s, n / (u + s)))"
}
for db in kh kb; do
    rm -rf "$dir/db.$db"
    run "import into .$db" import "$dir/src.kch" "$dir/db.$db" --no-verify
    rm -rf "$dir/db.$db"
    run "import into .$db + verify" import "$dir/src.kch" "$dir/db.$db"
    rm -rf "$dir/db.$db"
done
rm -f "$dir/src.kch"
