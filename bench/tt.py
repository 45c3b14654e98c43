#!/usr/bin/python3
"""Tokyo Tyrant's protocol beside memcached's text protocol, on the same kurad.

For each backend (the in-memory cache, the hash file, the B+ tree) starts
one kurad, pinned with taskset to CPU 0 while kura-bench runs on CPU 1 (when
the machine has two), fills the key space once, then runs each cell with
--proto text and --proto tt in turn, repeatedly, so that each ratio compares
runs made seconds apart against the same server and data:

    put      sets (text "set", TT put), 32-byte values
    get      gets of keys that are there (text "get k", TT get)
    mget10   gets of 10 keys a request (text "get k1 ... k10", TT mget)

each with 1 and with 16 connections (one client thread, one request in
flight a connection).  No --verify: a TT put stores flags 0 where a text
set stores kura-bench's flags, so the text gets that follow would count
mismatches (test_tt.py checks the values themselves).  Prints a table of the median ops/s of each and the
ratio tt/text (issue 21's target: within 10%, i.e. >= 0.90), and writes it
to bench/results/tt.md and tt.csv.

With --instructions it counts instead what each request costs the server in
instructions, under callgrind (valgrind), which a loaded machine does not
change: kurad with one worker on each backend (-sync none: no syncs timed
by the clock, whose count a slow run under valgrind would change), filled with 1,000 keys, then
one cell's requests (-P 16 -n N), minus a run with the fill alone (each the
least of two runs), divided by the requests: the ratio tt/text of those is the protocol's own cost.

    bench/tt.py [--build DIR] [--reps N] [--ops N] [--backends cache,hash,tree]
    bench/tt.py --instructions [--session] [--ops N] ...

--session counts only the instructions kura_session_process() runs (the
protocol and the engine): the event loop and the socket I/O, alike for both
protocols, are left out, and so are the stores' background threads, whose
work follows the clock (the hash file's checkpoints) and so varies from run
to run under valgrind.
"""
import argparse, csv, os, shutil, socket, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
KEYS = 20000
CELLS = [("put", ["-r", "1:0"], 1), ("get", ["-r", "0:1"], 1), ("mget10", ["-r", "0:1", "-m", "10"], 10)]
CONNS = [1, 16]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin(cpu):
    if shutil.which("taskset") and os.cpu_count() and os.cpu_count() >= 2:
        return ["taskset", "-c", str(cpu)]
    return []


def start(build, db, tmp):
    port = free_port()
    argv = pin(0) + [os.path.join(build, "kurad"), "-p", str(port), "-t", "4", "-m", "1024"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    argv.append({"cache": "*", "hash": os.path.join(tmp, "data.kh"),
                 "tree": os.path.join(tmp, "data.kb")}[db])
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit("kurad on %s did not start" % db)
            time.sleep(0.05)


def bench(build, port, proto, args, conns, ops):
    argv = pin(1) + [os.path.join(build, "kura-bench"), "-p", str(port), "--proto", proto,
                     "-k", str(KEYS), "-n", str(ops), "-c", str(conns), "-q", "--csv"] + args
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit("kura-bench %s failed (%d): %s" % (" ".join(argv), p.returncode,
                                                            p.stderr.strip()[-300:]))
    rows = list(csv.DictReader(p.stdout.strip().splitlines()))
    return float(rows[-1]["ops_per_sec"])


def callgrind_total(build, db, tmp, load, toggle):
    """Instructions of a kurad run (one worker, under callgrind) that serves
    load(port) and stops."""
    port = free_port()
    out = os.path.join(tmp, "callgrind.out")
    dbname = {"cache": "*", "hash": os.path.join(tmp, "data.kh"),
              "tree": os.path.join(tmp, "data.kb")}[db]
    for f in ("data.kh", "data.kb"):
        p = os.path.join(tmp, f)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out] + toggle + [
            os.path.join(build, "kurad"), "-p", str(port), "-t", "1", "-sync", "none", dbname]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit("kurad under callgrind did not start")
            time.sleep(0.1)
    load(port)
    proc.terminate()
    proc.wait(timeout=300)
    with open(out) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                os.remove(out)
                return int(line.split()[1])
    raise SystemExit("no total in callgrind's output")


def instructions(a, build):
    rows = []
    keys = 1000
    # --session: only what kura_session_process() runs (protocol and engine);
    # the event loop and socket I/O, alike for both protocols, and the
    # stores' background threads (the hash file's checkpoints, timed by the
    # clock, which a run under valgrind stretches) are left out
    toggle = ["--toggle-collect=kura_session_process"] if a.session else []

    def run(port, proto, args, n):
        argv = [os.path.join(build, "kura-bench"), "-p", str(port), "--proto", proto, "-k",
                str(keys), "-n", str(n), "-P", "16", "-q", "--seed", "7"] + args
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, timeout=600)

    def fill(port):
        run(port, "text", ["-r", "1:0", "--pattern", "seq"], keys)

    for db in a.backends.split(","):
        tmp = tempfile.mkdtemp(prefix="kura-ttinstr-")
        try:
            # the least of two runs: a store's background work (the hash
            # file's checkpoints) lands in one run or the other
            base = min(callgrind_total(build, db, tmp, fill, toggle) for _ in range(2))
            for name, args, per in CELLS:
                n = max(200, a.ops // per)
                cost = {}
                for proto in ("text", "tt"):
                    def load(port):
                        fill(port)
                        run(port, proto, args, n)
                    cost[proto] = (min(callgrind_total(build, db, tmp, load, toggle)
                                       for _ in range(2)) - base) / n
                rows.append((db, name, cost["text"], cost["tt"], cost["tt"] / cost["text"]))
                print("%-6s %-7s text %8.0f  tt %8.0f  instr/request  tt/text %.2f" % rows[-1],
                      flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    lines = ["| backend | cell | text instr/request | TT instr/request | TT/text |",
             "|---|---|---|---|---|"]
    lines += ["| %s | %s | %.0f | %.0f | %.2f |" % r for r in rows]
    os.makedirs(RESULTS, exist_ok=True)
    name = "tt-instructions-session.md" if a.session else "tt-instructions.md"
    with open(os.path.join(RESULTS, name), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--backends", default="cache,hash,tree")
    ap.add_argument("--instructions", action="store_true")
    ap.add_argument("--session", action="store_true")
    a = ap.parse_args()
    build = os.path.join(ROOT, a.build) if not os.path.isabs(a.build) else a.build
    if a.instructions:
        instructions(a, build)
        return
    rows = []
    for db in a.backends.split(","):
        tmp = tempfile.mkdtemp(prefix="kura-ttbench-")
        proc, port = start(build, db, tmp)
        try:
            bench(build, port, "text", ["-r", "1:0", "--pattern", "seq"], 1, KEYS)    # fill
            for name, args, per in CELLS:
                for conns in CONNS:
                    ops = max(1000, a.ops // per)
                    res = {"text": [], "tt": []}
                    for _ in range(a.reps):
                        for proto in ("text", "tt"):
                            res[proto].append(bench(build, port, proto, args, conns, ops))
                    text, tt = statistics.median(res["text"]), statistics.median(res["tt"])
                    rows.append((db, name, conns, text, tt, tt / text))
                    print("%-6s %-7s c%-3d text %9.0f  tt %9.0f  tt/text %.2f" % rows[-1],
                          flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "tt.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["backend", "cell", "conns", "text_ops_s", "tt_ops_s", "ratio"])
        for r in rows:
            w.writerow([r[0], r[1], r[2], "%.0f" % r[3], "%.0f" % r[4], "%.3f" % r[5]])
    lines = ["| backend | cell | conns | text ops/s | TT ops/s | TT/text |",
             "|---|---|---|---|---|---|"]
    lines += ["| %s | %s | %d | %.0f | %.0f | %.2f |" % r for r in rows]
    with open(os.path.join(RESULTS, "tt.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
