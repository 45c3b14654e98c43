#!/usr/bin/python3
"""The update log and replication, measured (`make bench-repl`; `make bench`
runs it after bench/run.py).

  ulog cost   kurad on a hash file, 16 connections of 100-byte sets for a
              few seconds, with and without -ulog, in each -sync mode; the
              runs of a mode alternate (plain, ulog, plain, ulog, ...) on
              fresh servers, and the median of each is compared.
  replica     the same load on a master (-ulog, -sync interval) with a
              replica (-mhost) on the same machine: the master's rate, the
              replica's applied rate, its lag sampled every 0.2 s (largest),
              and how long it takes to catch up once the load stops.
  copy        a master holding N items (default 1,000,000 of 100 bytes) whose
              update log does not reach back to an empty store, and a new
              replica: seconds until the full copy is applied and the
              replica in sync (then "digest" checks that both hold the same).

Servers run pinned to CPU 0 (master and replica share it), kura-bench to
CPU 1, as bench/run.py does.  Results: a table on stdout,
bench/results/repl.csv, bench/results/repl.png, and the section of
docs/benchmarks.md between its REPL RESULTS markers.

    bench/repl.py                     # everything (about 3 minutes)
    bench/repl.py --quick             # shorter runs, 100,000 items
"""
import argparse, csv, datetime, json, os, shutil, socket, statistics, subprocess, sys
import tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R          # noqa: E402  (bench/run.py: ports, pinning, plots)

ROOT = R.ROOT


def stats(port, sub=b""):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"stats" + (b" " + sub if sub else b"") + b"\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            d = s.recv(65536)
            if not d:
                break
            buf += d
    out = {}
    for ln in buf.split(b"\r\n"):
        p = ln.split(b" ", 2)
        if len(p) == 3 and p[0] == b"STAT":
            out[p[1].decode()] = p[2].decode()
    return out


def digest(port, n):
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        s.sendall(b"digest %d\r\n" % n)
        f = s.makefile("rb")
        return [ln for ln in iter(f.readline, b"END\r\n")]


class Kurad:
    def __init__(self, a, tmp, name, args, datadir=None):
        self.a, self.name = a, name
        self.datadir = datadir or tempfile.mkdtemp(prefix=name + "-", dir=tmp)
        self.args = args
        self.proc = None

    def start(self, port=None, timeout=120):
        # a free port can be taken between the check and the bind (a server
        # of an earlier part still closing): a new one is tried then
        for attempt in range(5):
            self.port = port or R.free_port()
            user = ["-u", "root"] if os.geteuid() == 0 else []
            cmd = [self.a.kurad, "-port", str(self.port), "-th", "4"] + user + \
                [x.replace("DIR", self.datadir) for x in self.args]
            self.cmdline = R.shown(cmd, self.datadir)
            logp = os.path.join(self.datadir, "server.log")
            logf = open(logp, "ab")
            self.proc = subprocess.Popen(R.taskset(self.a.server_cpus) + cmd, stdout=logf,
                                         stderr=subprocess.STDOUT, cwd=self.datadir,
                                         start_new_session=True)
            logf.close()
            if R.wait_listening(self.port, self.proc, timeout):
                return self
            R.stop(self.proc, timeout=10)
            with open(logp, errors="replace") as f:
                log = f.read()[-2000:]
            if port or "in use" not in log:
                break
        raise SystemExit("repl.py: %s did not start: %s\n%s" % (self.name, self.cmdline, log))

    def stop(self):
        R.stop(self.proc, timeout=60)


def load(a, port, seconds=None, ops=None, keys=100000, prefix="r:"):
    cmd = R.taskset(a.client_cpus) + [a.bench, "-p", str(port), "--threads", "1",
                                      "--conns", "16", "--ratio", "1:0", "--value-size", "100",
                                      "--keys", str(keys), "--key-prefix", prefix,
                                      "--pattern", "seq" if ops else "uniform", "--json",
                                      "--quiet", "--timeout", "60"]
    cmd += ["--duration", str(seconds)] if seconds else ["--ops", str(ops)]
    return cmd


def run_load(a, port, **kw):
    p = subprocess.run(load(a, port, **kw), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode != 0:
        raise SystemExit("repl.py: kura-bench failed: " + p.stderr[-500:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def rate_of(j):
    for k in ("ops_per_sec", "ops_s", "rate"):
        if k in j:
            return float(j[k])
    return float(j["ops"]) / float(j["seconds"])


def part_ulog(a, tmp, rows):
    R.log("\n== ulog cost: 16 conns, 100-byte sets, %g s a run, %d runs each ==" %
          (a.duration, a.reps))
    for sync in ("none", "interval", "always"):
        got = {"plain": [], "ulog": []}
        for rep in range(a.reps):
            for variant in ("plain", "ulog"):
                args = ["-sync", sync] + (["-ulog", "DIR/ul"] if variant == "ulog" else []) + \
                    ["DIR/bench.kh"]
                k = Kurad(a, tmp, "ulog-%s-%s" % (sync, variant), args).start()
                try:
                    got[variant].append(rate_of(run_load(a, k.port, seconds=a.duration)))
                finally:
                    k.stop()
                    shutil.rmtree(k.datadir, ignore_errors=True)
        p, u = R.median(got["plain"]), R.median(got["ulog"])
        rows.append({"part": "ulog", "case": "sync " + sync, "plain_ops_s": round(p),
                     "ulog_ops_s": round(u), "ratio": round(u / p, 3),
                     "plain_runs": " ".join("%d" % x for x in got["plain"]),
                     "ulog_runs": " ".join("%d" % x for x in got["ulog"])})
        R.log("  -sync %-8s without %s  with -ulog %s  ratio %.2f   (runs %s / %s)" % (
            sync, R.fmt_rate(p), R.fmt_rate(u), u / p,
            ", ".join(R.fmt_rate(x) for x in got["plain"]),
            ", ".join(R.fmt_rate(x) for x in got["ulog"])))


def part_replica(a, tmp, rows):
    R.log("\n== a replica on the same machine, the master at full write rate ==")
    m = Kurad(a, tmp, "master", ["-sid", "1", "-ulog", "DIR/ul", "DIR/bench.kh"]).start()
    r = Kurad(a, tmp, "replica", ["-sid", "2", "-ulog", "DIR/ul", "-mhost", "127.0.0.1",
                                  "-mport", str(m.port), "DIR/bench.kh"]).start()
    try:
        end = time.monotonic() + 30
        while stats(r.port).get("repl_connected") != "1" and time.monotonic() < end:
            time.sleep(0.05)
        p = subprocess.Popen(load(a, m.port, seconds=a.duration), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        lags, t0 = [], time.monotonic()
        while p.poll() is None:
            lags.append(int(stats(r.port).get("repl_lag_us", 0)))
            time.sleep(0.2)
        out, err = p.communicate()
        j = json.loads(out.strip().splitlines()[-1])
        stopped = time.monotonic()
        applied0 = int(stats(r.port)["repl_rows_applied"])
        while True:
            last = int(stats(m.port)["ulog_last_ts"])
            if int(stats(r.port)["repl_position"]) >= last:
                break
            if time.monotonic() - stopped > 120:
                raise SystemExit("repl.py: the replica did not catch up in 120 s")
            time.sleep(0.01)
        catchup = time.monotonic() - stopped
        applied = int(stats(r.port)["repl_rows_applied"])
        elapsed = stopped - t0 + catchup
        rate = rate_of(j)
        rows.append({"part": "replica", "case": "master rate with a replica",
                     "ulog_ops_s": round(rate), "replica_rows_s": round(applied / elapsed),
                     "max_lag_ms": round(max(lags or [0]) / 1000, 1),
                     "catchup_s": round(catchup, 3)})
        R.log("  master %s sets/s; replica applied %d rows (%s rows/s); largest lag sampled "
              "%.1f ms; in sync %.3f s after the load stopped (%d rows then)" % (
                  R.fmt_rate(rate), applied, R.fmt_rate(applied / elapsed),
                  max(lags or [0]) / 1000, catchup, applied - applied0))
    finally:
        r.stop()
        m.stop()


def part_copy(a, tmp, rows):
    n = a.items
    R.log("\n== a full copy of %s items of 100 bytes to a new replica ==" % R.fmt_ops(n))
    mdir = tempfile.mkdtemp(prefix="copy-master-", dir=tmp)
    m = Kurad(a, tmp, "copy-master", ["DIR/bench.kh"], datadir=mdir).start()
    run_load(a, m.port, ops=n, keys=n, prefix="c:")
    m.stop()
    # the same store, now with a log that does not reach back: a copy is needed
    m = Kurad(a, tmp, "copy-master", ["-sid", "1", "-ulog", "DIR/ul", "DIR/bench.kh"],
              datadir=mdir).start()
    t0 = time.monotonic()
    r = Kurad(a, tmp, "copy-replica", ["-sid", "2", "-ulog", "DIR/ul", "-mhost", "127.0.0.1",
                                       "-mport", str(m.port), "DIR/bench.kh"]).start()
    try:
        while True:
            st = stats(r.port)
            if st.get("repl_copies_received") == "1" and st.get("repl_copying") == "0" and \
                    st.get("repl_connected") == "1":
                break
            if time.monotonic() - t0 > 600:
                raise SystemExit("repl.py: the copy did not complete in 600 s")
            time.sleep(0.05)
        secs = time.monotonic() - t0
        same = digest(m.port, 256) == digest(r.port, 256)
        items = int(stats(r.port)["curr_items"])
        rows.append({"part": "copy", "case": "%d items" % n, "copy_s": round(secs, 2),
                     "items_s": round(n / secs), "same": same})
        R.log("  %d items in %.2f s (%s items/s), replica holds %d, digest %s" % (
            n, secs, R.fmt_rate(n / secs), items, "equal" if same else "DIFFERS"))
        if not same:
            raise SystemExit("repl.py: the replica's digest differs from the master's")
    finally:
        r.stop()
        m.stop()


def markdown(rows, a):
    out = ["Measured %s on %s (%s); `bench/repl.py%s`." % (
        datetime.date.today().isoformat(), R.machine_info().get("cpu", "this machine"),
        "server on CPU %s, kura-bench on CPU %s" % (a.server_cpus, a.client_cpus),
        " --quick" if a.quick else ""), ""]
    out += ["| -sync | sets/s without -ulog (median) | with -ulog (median) | ratio | runs without | runs with |",
            "|---|---|---|---|---|---|"]
    for r in rows:
        if r["part"] == "ulog":
            runs = lambda k: ", ".join(R.fmt_rate(int(x)) for x in r[k].split())
            out.append("| %s | %s | %s | %.2f | %s | %s |" % (
                r["case"][5:], R.fmt_rate(r["plain_ops_s"]), R.fmt_rate(r["ulog_ops_s"]),
                r["ratio"], runs("plain_runs"), runs("ulog_runs")))
    out.append("")
    for r in rows:
        if r["part"] == "replica":
            out.append("A replica on the same CPU as its master (-sync interval): the master "
                       "took %s sets/s, the replica applied %s rows/s; the largest lag sampled "
                       "during the load was %.1f ms, and it was in sync %.3f s after the load "
                       "stopped." % (R.fmt_rate(r["ulog_ops_s"]), R.fmt_rate(r["replica_rows_s"]),
                                     r["max_lag_ms"], r["catchup_s"]))
        if r["part"] == "copy":
            out.append("")
            out.append("A full copy of %s to a new replica: %.2f s (%s items/s), digest %s." % (
                r["case"], r["copy_s"], R.fmt_rate(r["items_s"]),
                "equal" if r["same"] else "different"))
    out += ["", "![update log and replication](../bench/results/repl.png)"]
    return "\n".join(out) + "\n"


def splice(md):
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    text = open(path).read()
    b, e = "<!-- BEGIN REPL RESULTS (bench/repl.py rewrites this part) -->", "<!-- END REPL RESULTS -->"
    i, j = text.find(b), text.find(e)
    if i < 0 or j < i:
        return False
    with open(path, "w") as f:
        f.write(text[:i + len(b)] + "\n" + md.rstrip() + "\n" + text[j:])
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--duration", type=float, default=4.0, help="seconds a run (default 4)")
    ap.add_argument("--reps", type=int, default=3, help="runs of each case (default 3)")
    ap.add_argument("--items", type=int, default=1000000, help="items to copy (default 1M)")
    ap.add_argument("--quick", action="store_true", help="1 s runs, 1 rep, 100,000 items")
    ap.add_argument("--only", default="ulog,replica,copy")
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--no-docs", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.duration, a.reps, a.items = 1.0, 1, 100000
    a.build = os.path.abspath(a.build)     # servers run in their own directories
    a.kurad = os.path.join(a.build, "kurad")
    a.bench = os.path.join(a.build, "kura-bench")
    for f in (a.kurad, a.bench):
        if not os.access(f, os.X_OK):
            sys.exit("repl.py: no %s (make %s)" % (f, os.path.relpath(f, ROOT)))
    tmp = tempfile.mkdtemp(prefix="kura-repl-bench-")
    rows = []
    try:
        if "ulog" in a.only:
            part_ulog(a, tmp, rows)
        if "replica" in a.only:
            part_replica(a, tmp, rows)
        if "copy" in a.only:
            part_copy(a, tmp, rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(R.RESULTS, exist_ok=True)
    keys = sorted({k for r in rows for k in r})
    with open(os.path.join(R.RESULTS, "repl.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    bars = [(r["case"], [r["plain_ops_s"], r["ulog_ops_s"]]) for r in rows if r["part"] == "ulog"]
    R.gnuplot_bars(bars, ["without -ulog", "with -ulog"], os.path.join(R.RESULTS, "repl.png"),
                   "kurad hash file, 16 connections of 100-byte sets", "sets/s", logscale=False)
    md = markdown(rows, a)
    with open(os.path.join(R.RESULTS, "repl.md"), "w") as f:
        f.write(md)
    R.log("\n" + md)
    if not a.no_docs:
        splice(md)


if __name__ == "__main__":
    main()
