#!/usr/bin/python3
"""Kyoto Tycoon's own benchmark client against ktserver and kurad -kt, in
one run on the same load (issue 34).

For each backend (the hash file against ktserver on a .kch, the B+ tree
against a .kct) starts ktserver 0.9.56 and kurad with a -kt listener,
each with 4 worker threads and pinned with taskset to CPU 0 while the
client runs on CPU 1 (when the machine has two), and runs Kyoto Tycoon's
`ktremotetest bulk` against one server then the other, in turn, REPS
times, each run on a cleared database:

    bulk          set_bulk, get_bulk, remove_bulk over TSV-RPC, one record
                  a request (ktremotetest's default -bulk 1), then its
                  "mixed operations" phase: a random mix of set_bulk,
                  get_bulk, remove_bulk and play_script (which both servers
                  refuse: no scripting)
    bulk -bin     the same over the binary protocol (0xB8, 0xBA, 0xB9)
    bulk -bulk 64, bulk -bin -bulk 64
                  64 records a request

each with 4 client threads of RNUM records (-th 4; 10 x RNUM for -bulk 64).  ktremotetest prints
each phase's wall time; a phase's rate is its records (4 x RNUM) over that
time.  Prints a table of the median records/s of each phase on each server
and the ratio kurad/ktserver, and writes bench/results/kt.md, kt.csv and
kt.png (gnuplot).

Kyoto Tycoon's programs are built by hand (docs/HACKING.md, "Kyoto
Tycoon's clients"); KURA_KT_BIN or --kt-bin names their directory.

    bench/kt.py [--build DIR] [--kt-bin DIR] [--reps N] [--rnum N] [--backends hash,tree]
    bench/kt.py --plot [--rnum N]     the plot again from kt.csv
"""
import argparse, csv, os, re, shutil, socket, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
import run as R          # noqa: E402  (bench/run.py: pinning, plots)
from ktref import free_port as low_port    # noqa: E402  (a port below 32768, as Kyoto Tycoon needs)

# (name, ktremotetest's options, records a thread as a multiple of --rnum:
# 64 records a request run 10 times as many, so that a phase lasts seconds)
CELLS = [("bulk", [], 1), ("bulk -bin", ["-bin"], 1), ("bulk -bulk 64", ["-bulk", "64"], 10),
         ("bulk -bin -bulk 64", ["-bin", "-bulk", "64"], 10)]
PHASES = ["set", "get", "remove", "mixed"]
THREADS = 4


def pin(cpu):
    return R.taskset(str(cpu)) if (os.cpu_count() or 1) >= 2 else []


def wait_port(port, proc, what):
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit("%s exited at start (%d)" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("%s did not listen" % what)


def start_ktserver(ktbin, db, tmp):
    port = low_port()
    env = dict(os.environ, LD_LIBRARY_PATH=ktbin)
    argv = pin(0) + [os.path.join(ktbin, "ktserver"), "-host", "127.0.0.1", "-port", str(port),
                     "-th", str(THREADS), "-log", os.path.join(tmp, "ktserver.log"),
                     os.path.join(tmp, {"hash": "casket.kch", "tree": "casket.kct"}[db])]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc, "ktserver")
    return proc, port


def start_kurad(build, db, tmp):
    port, ktport = R.free_port(), low_port()
    argv = pin(0) + [os.path.join(build, "kurad"), "-p", str(port), "-t", str(THREADS),
                     "-kt", "127.0.0.1:%d" % ktport]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    argv.append(os.path.join(tmp, {"hash": "data.kh", "tree": "data.kb"}[db]))
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(ktport, proc, "kurad")
    return proc, ktport


def ktremotetest(ktbin, port, args, rnum):
    """{phase: records/s} of one ktremotetest bulk run."""
    env = dict(os.environ, LD_LIBRARY_PATH=ktbin)
    argv = pin(1) + [os.path.join(ktbin, "ktremotetest"), "bulk", "-th", str(THREADS)] + args + \
        ["-host", "127.0.0.1", "-port", str(port), str(rnum)]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0 or not p.stdout.rstrip().endswith("ok"):
        raise SystemExit("%s failed (%d):\n%s\n%s" % (" ".join(argv), p.returncode,
                                                     p.stdout[-1500:], p.stderr[-1500:]))
    # "setting records:" ... "time: 1.234", per phase, after the opening's
    times = [float(t) for t in re.findall(r"^time: ([0-9.]+)$", p.stdout, re.M)]
    heads = re.findall(r"^(opening|setting|getting|removing|performing|closing)", p.stdout, re.M)
    t = dict(zip(heads, times))
    n = THREADS * rnum
    return {"set": n / t["setting"], "get": n / t["getting"], "remove": n / t["removing"],
            "mixed": n / t["performing"]}


def clear(ktbin, port):
    env = dict(os.environ, LD_LIBRARY_PATH=ktbin)
    subprocess.run([os.path.join(ktbin, "ktremotemgr"), "clear", "-host", "127.0.0.1", "-port",
                    str(port)], env=env, check=True, timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--kt-bin", default=os.environ.get("KURA_KT_BIN", ""))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rnum", type=int, default=5000)
    ap.add_argument("--backends", default="hash,tree")
    ap.add_argument("--plot", action="store_true", help="only plot bench/results/kt.csv again")
    a = ap.parse_args()
    if a.plot:
        plot_csv(a.rnum)
        return
    build = a.build if os.path.isabs(a.build) else os.path.join(R.ROOT, a.build)
    if not a.kt_bin or not os.access(os.path.join(a.kt_bin, "ktremotetest"), os.X_OK):
        raise SystemExit("Kyoto Tycoon's programs: --kt-bin DIR or KURA_KT_BIN "
                         "(docs/HACKING.md, Kyoto Tycoon's clients)")
    rows = []
    for db in a.backends.split(","):
        tmp_k, tmp_t = tempfile.mkdtemp(prefix="kura-ktbench-"), tempfile.mkdtemp(prefix="kt-")
        servers = {}
        try:
            servers["ktserver"] = start_ktserver(a.kt_bin, db, tmp_t)
            servers["kurad"] = start_kurad(build, db, tmp_k)
            for cell, args, scale in CELLS:
                res = {who: {ph: [] for ph in PHASES} for who in servers}
                for _ in range(a.reps):
                    for who, (_, port) in servers.items():
                        clear(a.kt_bin, port)
                        for ph, v in ktremotetest(a.kt_bin, port, args, a.rnum * scale).items():
                            res[who][ph].append(v)
                for ph in PHASES:
                    k = statistics.median(res["kurad"][ph])
                    t = statistics.median(res["ktserver"][ph])
                    rows.append((db, cell, ph, t, k, k / t))
                    R.log("%-5s %-20s %-7s ktserver %9.0f  kurad %9.0f  kurad/ktserver %.2f"
                          % rows[-1])
        finally:
            for proc, _ in servers.values():
                R.stop(proc, timeout=60)
            shutil.rmtree(tmp_k, ignore_errors=True)
            shutil.rmtree(tmp_t, ignore_errors=True)
    os.makedirs(R.RESULTS, exist_ok=True)
    with open(os.path.join(R.RESULTS, "kt.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["backend", "cell", "phase", "ktserver_recs_s", "kurad_recs_s", "ratio"])
        for r in rows:
            w.writerow([r[0], r[1], r[2], "%.0f" % r[3], "%.0f" % r[4], "%.3f" % r[5]])
    lines = ["| backend | ktremotetest | phase | ktserver records/s | kurad records/s | "
             "kurad/ktserver |", "|---|---|---|---:|---:|---:|"]
    lines += ["| %s | %s | %s | %.0f | %.0f | **%.2f** |" % r for r in rows]
    with open(os.path.join(R.RESULTS, "kt.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    plot(rows, a.rnum)
    R.log("\n".join(lines))


def plot(rows, rnum):
    R.gnuplot_bars([("%s %s %s" % (r[0], r[1], r[2]), [r[3], r[4]]) for r in rows],
                   ["ktserver 0.9.56", "kurad -kt"], os.path.join(R.RESULTS, "kt.png"),
                   "ktremotetest bulk, %d threads x %d records (x10 for -bulk 64), "
                   "servers on CPU 0 (4 workers)" % (THREADS, rnum), "records/s")


def plot_csv(rnum):
    """--plot: the plot again from bench/results/kt.csv."""
    with open(os.path.join(R.RESULTS, "kt.csv")) as f:
        rows = [(r["backend"], r["cell"], r["phase"], float(r["ktserver_recs_s"]),
                 float(r["kurad_recs_s"])) for r in csv.DictReader(f)]
    plot(rows, rnum)


if __name__ == "__main__":
    main()
