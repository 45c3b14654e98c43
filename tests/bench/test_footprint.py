#!/usr/bin/python3
"""Smoke test of bench/footprint.py (issue 23's figures): every part runs.

Runs the script at a toy size (2,000 engine records, 200 values of 20 KB,
8 MiB of dd) into a temp directory, without touching docs/benchmarks.md,
and asserts that each figure came out as a positive ratio with its
yardstick -- never a speed.  Then the negative: with a kurad that cannot
start, the script fails and says which part.

Prints TAP lines; exits non-zero on any failure.  Needs memcached and
kyotocabinet-utils (a missing skip without them).
"""
import csv, os, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("KURA_BUILD", os.path.join(ROOT, "build-test")))
SCRIPT = os.path.join(ROOT, "bench", "footprint.py")
TOY = ["--reps", "1", "--engine-rnum", "2000", "--keys", "200", "--get-ops", "1000",
       "--set-keys", "200", "--dd-mib", "8", "--no-docs"]
FIGURES = ["hash key order", "hash random order", "tree key order", "tree random order",
           "tree 20 KB get CPU", "tree -th 2 / -th 1", "memcached -t 2 / -t 1",
           "hash 20 KB sets / dd", "tree 20 KB sets / dd",
           "memcached 20 KB sets / dd", "hash 20 KB sets / ceiling", "tree 20 KB sets / ceiling",
           "hash 20 KB set CPU", "tree 20 KB set CPU"]

n_test = failed = 0


def tap(ok, name, diag=""):
    global n_test, failed
    n_test += 1
    failed += not ok
    print("%s %d - %s" % ("ok" if ok else "not ok", n_test, name), flush=True)
    if diag and not ok:
        for line in diag.rstrip().splitlines()[-30:]:
            print("#   " + line)


def skip(name, reason):
    global n_test, failed
    n_test += 1
    line, bad = kuratest.skip_line(n_test, name, reason)
    failed += bad
    print(line, flush=True)


def run(out, extra=(), env=None):
    p = subprocess.run([sys.executable, SCRIPT, "--build", BUILD, "--out", out] + TOY +
                       list(extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=600 * kuratest.SCALE, env=env)
    return p.returncode, p.stdout


def main():
    print("1..3")
    need = [b for b in ("memcached", "kchashtest", "kctreetest") if not shutil.which(b)]
    built = [f for f in ("kurad", "kura-bench", "kura-enginebench")
             if not os.access(os.path.join(BUILD, f), os.X_OK)]
    if need or built:
        why = (kuratest.missing("%s (apt-get install memcached kyotocabinet-utils)" % ", ".join(need))
               if need else kuratest.missing("%s not built in %s" % (", ".join(built), BUILD)))
        for name in ("every part runs", "each figure has a ratio", "a kurad that cannot start fails"):
            skip(name, why)
        return 1 if failed else 0
    tmp = tempfile.mkdtemp(prefix="kura-footprint-")
    try:
        rc, out = run(tmp)
        tap(rc == 0, "every part runs at a toy size (exit %d)" % rc, out)
        try:
            with open(os.path.join(tmp, "footprint.csv")) as f:
                rows = {r["label"]: r for r in csv.DictReader(f)}
        except OSError as e:
            rows, out = {}, out + "\n" + str(e)
        bad = [lab for lab in FIGURES if lab not in rows or not float(rows[lab]["ratio"]) > 0
               or not rows[lab]["yardstick"]]
        tap(not bad, "each figure has a positive ratio and a yardstick (missing: %s)" % bad,
            out)
        env = dict(os.environ, KURAD="/bin/false")
        rc, out = run(os.path.join(tmp, "neg"), ["--parts", "cpu"], env)
        tap(rc == 1 and "FAILED cpu" in out and "did not start" in out,
            "a kurad that cannot start: exit 1 naming the part (exit %d)" % rc, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
