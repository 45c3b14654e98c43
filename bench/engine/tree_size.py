#!/usr/bin/python3
"""tree_size.py - the B+ tree's files beside Kyoto Cabinet's, in one run.

    bench/engine/tree_size.py [--build build] [--base OTHER_BUILD] [--runs 3] [RNUM]

For keys in order and in random order, runs `kura-enginebench [-rnd]
DIR/k.kb RNUM` (1M records of 8-byte keys and values by default: write
phase, close, read phase, close) and `kctreetest order [-rnd] -set` /
`-get` on DIR/c.kct, and reports the files each leaves: the tree file,
the log's segments, and their sum (st_size; the blocks allocated beside),
the median of --runs runs, and the ratios the issue asks for: kura's
files over kctreetest's in key order, and random order over key order.
With --base, a second kura build (for instance the previous commit's) runs
in the same loop, so its speed and sizes compare with no drift of the
machine between them.  Prints a markdown table; exit 2 if a tool is
missing.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def files_of(path):
    """(tree bytes, log bytes, allocated bytes) of a kura database dir or a file"""
    if os.path.isfile(path):
        st = os.stat(path)
        return st.st_size, 0, st.st_blocks * 512
    tree = log = alloc = 0
    for name in os.listdir(path):
        st = os.stat(os.path.join(path, name))
        alloc += st.st_blocks * 512
        if name == "tree":
            tree += st.st_size
        elif name.endswith(".seg"):
            log += st.st_size
    return tree, log, alloc


def kura_run(eb, tmp, rnd, n):
    db = os.path.join(tmp, "k.kb")
    shutil.rmtree(db, ignore_errors=True)
    cmd = [eb] + (["-rnd"] if rnd else []) + [db, str(n)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"write_s=([\d.]+) read_s=([\d.]+)", out)
    tree, log, alloc = files_of(db)
    shutil.rmtree(db, ignore_errors=True)
    return float(m.group(1)), float(m.group(2)), tree, log, alloc


def kc_run(tmp, rnd, n):
    db = os.path.join(tmp, "c.kct")
    if os.path.exists(db):
        os.unlink(db)
    flags = ["-rnd"] if rnd else []
    t0 = time.monotonic()
    subprocess.run(["kctreetest", "order"] + flags + ["-set", db, str(n)],
                   capture_output=True, check=True)
    t1 = time.monotonic()
    subprocess.run(["kctreetest", "order"] + flags + ["-get", db, str(n)],
                   capture_output=True, check=True)
    t2 = time.monotonic()
    tree, log, alloc = files_of(db)
    os.unlink(db)
    return t1 - t0, t2 - t1, tree, log, alloc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rnum", nargs="?", type=int, default=1000000)
    ap.add_argument("--build", default="build")
    ap.add_argument("--base", help="another kura build to run beside (e.g. the previous commit's)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", help="where the files go (default: a temp dir under /tmp)")
    a = ap.parse_args()
    if not shutil.which("kctreetest"):
        print("kctreetest missing (Debian kyotocabinet-utils)", file=sys.stderr)
        return 2
    progs = [("kura", os.path.join(a.build, "kura-enginebench"))]
    if a.base:
        progs.append(("kura-base", os.path.join(a.base, "kura-enginebench")))
    tmp = tempfile.mkdtemp(prefix="kura-treesize-", dir=a.dir)
    res = {}
    try:
        for _ in range(a.runs):
            for rnd in (False, True):
                for name, eb in progs:
                    res.setdefault((name, rnd), []).append(kura_run(eb, tmp, rnd, a.rnum))
                res.setdefault(("kctreetest", rnd), []).append(kc_run(tmp, rnd, a.rnum))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: [statistics.median(x[i] for x in v) for i in range(5)] for k, v in res.items()}
    print("| %d records | order | write s | read s | tree MB | log MB | files MB | allocated MB |"
          % a.rnum)
    print("|---|---|---|---|---|---|---|---|")
    for (name, rnd), m in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print("| %s | %s | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f |"
              % (name, "random" if rnd else "key", m[0], m[1], m[2] / 1e6, m[3] / 1e6,
                 (m[2] + m[3]) / 1e6, m[4] / 1e6))
    for name, _ in progs:
        k, r, c = med[(name, False)], med[(name, True)], med[("kctreetest", False)]
        print("\n%s: files / kctreetest's, key order: %.2f; random / key order: %.2f"
              % (name, (k[2] + k[3]) / (c[2] + c[3]), (r[2] + r[3]) / (k[2] + k[3])))
    if a.base:
        for rnd in (False, True):
            n, b = med[("kura", rnd)], med[("kura-base", rnd)]
            print("speed, %s order, kura / base (time ratio, < 1 faster): write %.2f, read %.2f"
                  % ("random" if rnd else "key", n[0] / b[0], n[1] / b[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
