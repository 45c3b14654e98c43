#!/usr/bin/python3
"""kura beside memcached and the Cabinets, in one run (`make bench`).

Network part: starts memcached and kurad with each available backend on free
ports, each with the same thread count, pinned with taskset to the server CPU
set, while kura-bench runs pinned to the client CPU set (on a 2-core machine:
server on CPU 0, load generator on CPU 1).  All servers are started fresh for
every repetition; then each cell (the classic comparisons of issue 4, in an
order where reads follow the writes they read) runs against each server in
turn, so each ratio kura/memcached compares runs made seconds apart.

Engine part: in-process write and read of 1,000,000 records (8-byte keys and
values) with kura-enginebench on each kura backend that opens, beside Tokyo
Cabinet's tchtest/tcbtest and Kyoto Cabinet's kchashtest/kctreetest/kccachetest.

Results: a table on stdout, bench/results/{net,net-runs,engine,engine-runs}.csv,
bench/results/{net,engine}.png (gnuplot), bench/results/latest.md, and the
same tables spliced into docs/benchmarks.md between its RESULTS markers.

The whole run is bounded (default 570 s): op counts are scaled down from the
nominal ones (the table says which), and repetitions are cut short with a
note if the time budget would be exceeded.

    bench/run.py                      # everything that is available
    bench/run.py --self               # memcached against itself (no kurad yet)
    bench/run.py --quick              # 1 rep, 1/10 of the ops: checks the pipeline
    bench/run.py --servers memcached,kura-hash --only net
    bench/run.py --footprint          # then issue 23's figures (bench/footprint.py)
"""
import argparse, csv, datetime, json, os, platform, re, shutil, signal, socket
import statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shown(cmd, datadir):
    """A command line as the results show it: no path of this machine (the
    checkout's own becomes relative, the data dir DIR)."""
    # the data dir first: it may lie inside the checkout (bench/results/tmp)
    cmd = [a.replace(datadir + "/", "DIR/") for a in cmd]
    return " ".join(os.path.relpath(a, ROOT) if a.startswith(ROOT + "/") else a for a in cmd)
RESULTS = os.path.join(ROOT, "bench", "results")

# ----------------------------------------------------------------- the plan
#
# Each cell: id, title, nominal ops (what the classic comparison asks for),
# default ops run here, and kura-bench arguments.  Cells run in this order on
# one fresh server, so a "get" cell finds what the "set" cell before it wrote
# (same key prefix).  keys="ops" means: as many keys as ops.

def C(cid, title, nominal, ops, conns, ratio, keys, prefix, pattern="seq", pipeline=1,
      multiget=1, value=32, miss=0, prefill=False, proto="text"):
    return dict(id=cid, title=title, nominal=nominal, ops=ops, conns=conns, ratio=ratio,
                keys=keys, prefix=prefix, pattern=pattern, pipeline=pipeline,
                multiget=multiget, value=value, miss=miss, prefill=prefill, proto=proto)

PLAN = [
    C("set-c1", "100k sets, 1 conn", 100000, 20000, 1, "1:0", "ops", "a1:"),
    C("get-c1", "100k gets, 1 conn", 100000, 20000, 1, "0:1", "ops", "a1:"),
    C("miss-c1", "100k get misses, 1 conn", 100000, 20000, 1, "0:1", "ops", "a1:",
      pattern="uniform", miss=1),
    C("set-c20", "100k sets, 20 conns", 100000, 100000, 20, "1:0", "ops", "a20:"),
    C("get-c20", "100k gets, 20 conns", 100000, 100000, 20, "0:1", "ops", "a20:"),
    C("miss-c20", "100k get misses, 20 conns", 100000, 100000, 20, "0:1", "ops", "a20:",
      pattern="uniform", miss=1),
    C("1m-set-c1", "1M keys written, 1 conn", 1000000, 50000, 1, "1:0", "ops", "b1:"),
    C("1m-get-c1", "1M keys read, 1 conn", 1000000, 50000, 1, "0:1", "ops", "b1:"),
    C("1m-set-c4", "1M keys written, 4 conns", 1000000, 200000, 4, "1:0", "ops", "b4:"),
    C("1m-get-c4", "1M keys read, 4 conns", 1000000, 200000, 4, "0:1", "ops", "b4:"),
    C("mix-c1", "30% set/70% get, 10k keys, 1 conn", 100000, 20000, 1, "3:7", 10000, "c1:",
      pattern="uniform", prefill=True),
    C("mix-c16", "30% set/70% get, 10k keys, 16 conns", 100000, 100000, 16, "3:7", 10000,
      "c16:", pattern="uniform", prefill=True),
    C("100b-set-c16", "100 B values, 1M keys, sets, 16 conns", 1000000, 300000, 16, "1:0",
      "ops", "d:", value=100),
    C("100b-get-c16", "100 B values, 1M keys, gets, 16 conns", 1000000, 300000, 16, "0:1",
      "set", "d:", pattern="uniform", value=100),
    C("20k-set-c16", "20 KB values, 20k keys, sets, 16 conns", 20000, 20000, 16, "1:0", "ops",
      "e:", value=20000),
    C("20k-get-c16", "20 KB values, 20k keys, gets, 16 conns", 20000, 20000, 16, "0:1", "set",
      "e:", pattern="uniform", value=20000),
    C("pipe32-get", "pipelined gets, depth 32, 1 conn", 200000, 200000, 1, "0:1", 100000,
      "a20:", pattern="uniform", pipeline=32),
    C("mget10", "10-key multi-gets, 1 conn", 20000, 10000, 1, "0:1", 100000, "a20:",
      pattern="uniform", multiget=10),
    # the meta commands and the binary protocol (issue 13): set and get, and
    # ten quiet gets fenced by mn / noop (the pipelined form their clients use)
    C("meta-set-c1", "meta: 100k ms, 1 conn", 100000, 20000, 1, "1:0", "ops", "m1:",
      proto="meta"),
    C("meta-get-c1", "meta: 100k mg, 1 conn", 100000, 20000, 1, "0:1", "set", "m1:",
      pattern="uniform", proto="meta"),
    C("meta-mget10", "meta: 10 quiet mg + mn, 1 conn", 20000, 10000, 1, "0:1", "set", "m1:",
      pattern="uniform", multiget=10, proto="meta"),
    C("bin-set-c1", "binary: 100k set, 1 conn", 100000, 20000, 1, "1:0", "ops", "n1:",
      proto="binary"),
    C("bin-get-c1", "binary: 100k get, 1 conn", 100000, 20000, 1, "0:1", "set", "n1:",
      pattern="uniform", proto="binary"),
    C("bin-mget10", "binary: 10 getkq + noop, 1 conn", 20000, 10000, 1, "0:1", "set", "n1:",
      pattern="uniform", multiget=10, proto="binary"),
]

ENGINE_RNUM = 1000000

# ------------------------------------------------------------------ helpers

def log(msg=""):
    print(msg, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_listening(port, proc, deadline_s):
    """Polls until the port answers "version", the process dies, or the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"version\r\n")
                s.settimeout(2)
                if s.recv(100).startswith(b"VERSION"):
                    return True
        except OSError:
            time.sleep(0.02)
    return False


def stop(proc, timeout=10):
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def taskset(cpus):
    if cpus and shutil.which("taskset"):
        return ["taskset", "-c", cpus]
    return []


def machine_info():
    model, cores = "unknown", os.cpu_count() or 0
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    virt = ""
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
        m = re.search(r"Hypervisor vendor:\s*(\S+)", out)
        if m:
            virt = m.group(1)
    except OSError:
        pass
    deb = ""
    try:
        deb = open("/etc/debian_version").read().strip()
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    mcv = ""
    try:
        mcv = subprocess.run(["memcached", "-V"], stdout=subprocess.PIPE, text=True).stdout.strip()
    except OSError:
        pass
    return dict(cpu=model, cores=cores, virt=virt, kernel=platform.release(), debian=deb,
                mem_mb=mem, memcached=mcv)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def spread_pct(xs):
    if len(xs) < 2:
        return 0.0
    m = median(xs)
    return 100.0 * (max(xs) - min(xs)) / m if m else 0.0


def fmt_rate(x):
    if x != x:
        return "-"
    if x >= 1e6:
        return "%.2fM" % (x / 1e6)
    if x >= 1e3:
        return "%.1fk" % (x / 1e3)
    return "%.0f" % x


def fmt_ops(n):
    if n >= 1000000 and n % 1000000 == 0:
        return "%dM" % (n // 1000000)
    return "%dk" % (n // 1000) if n >= 1000 and n % 1000 == 0 else str(n)

# ------------------------------------------------------------------ servers

class Server:
    """One kind of server: how to start it, and whether it is available."""

    def __init__(self, name, kind, args, threads, cpus, tmp):
        self.name, self.kind, self.args = name, kind, args
        self.threads, self.cpus, self.tmp = threads, cpus, tmp
        self.proc = None
        self.port = None
        self.cmdline = ""
        self.variant = 0        # index into the command variants that worked

    def commands(self, port, datadir):
        t = str(self.threads)
        if self.kind == "memcached":
            cmd = [self.args["bin"], "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-t", t,
                   "-m", "1024", "-c", "4096"]
            if os.geteuid() == 0:
                cmd += ["-u", "nobody"]
            return [cmd]
        db = self.args["db"]
        if db != "*":
            db = os.path.join(datadir, db)
        # "extra": options of one measurement (bench/footprint.py: -sync interval)
        base = [self.args["bin"], "-port", str(port), "-th", t] + self.args.get("extra", [])
        # the same memory limit as memcached; as root, "-u root" keeps the
        # data files writable in our root-owned temp dir, without the warning
        user = ["-u", "root"] if os.geteuid() == 0 else []
        out = [base + ["-m", "1024"] + user + [db], base + user + [db]]
        if user:
            out += [base + ["-m", "1024", db], base + [db]]
        return out

    def start(self, deadline_s=15):
        datadir = tempfile.mkdtemp(prefix=self.name + "-", dir=self.tmp)
        self.datadir = datadir
        if os.geteuid() == 0:
            os.chmod(datadir, 0o777)        # the server may run as nobody
        variants = self.commands(0, datadir)
        order = [self.variant] + [i for i in range(len(variants)) if i != self.variant]
        errors = []
        for vi in order:
            for _attempt in range(2):
                port = free_port()
                cmd = self.commands(port, datadir)[vi]
                logpath = os.path.join(datadir, "server.log")
                logf = open(logpath, "wb")
                try:
                    proc = subprocess.Popen(taskset(self.cpus) + cmd, stdout=logf,
                                            stderr=subprocess.STDOUT, cwd=datadir,
                                            start_new_session=True)
                except OSError as e:
                    errors.append(str(e))
                    break
                finally:
                    logf.close()
                if wait_listening(port, proc, deadline_s):
                    self.proc, self.port, self.variant = proc, port, vi
                    self.cmdline = shown(cmd, datadir)
                    return True
                stop(proc)
                try:
                    lines = open(logpath, "rb").read().decode("utf-8", "replace").strip().splitlines()
                except OSError:
                    lines = []
                last = lines[-1] if lines else "exit status %s" % proc.returncode
                errors.append("`%s`: %s" % (shown(cmd, datadir),
                                            last.replace(datadir + "/", "DIR/")))
                if "in use" not in last:
                    break                   # refused, not a port race: next variant
        self.error = errors[-1] if errors else "did not start"
        shutil.rmtree(datadir, ignore_errors=True)
        return False

    def stop(self):
        stop(self.proc)
        self.proc = None
        shutil.rmtree(getattr(self, "datadir", ""), ignore_errors=True)

    def death(self):
        rc = self.proc.poll() if self.proc else None
        try:
            tail = open(os.path.join(self.datadir, "server.log"), "rb").read()[-300:]
            tail = tail.decode("utf-8", "replace").strip().replace("\n", " | ")
        except OSError:
            tail = ""
        return "exit status %s%s" % (rc, ", log: " + tail if tail else "")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


def make_servers(names, build, threads, cpus, tmp):
    kurad = os.environ.get("KURAD") or os.path.join(build, "kurad")
    mc = shutil.which("memcached") or "/usr/bin/memcached"
    out, seen = [], {}
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        label = n if seen[n] == 1 else "%s#%d" % (n, seen[n])
        if n == "memcached":
            out.append(Server(label, "memcached", {"bin": mc}, threads, cpus, tmp))
        elif n == "kura-cache":
            out.append(Server(label, "kurad", {"bin": kurad, "db": "*"}, threads, cpus, tmp))
        elif n == "kura-hash":
            out.append(Server(label, "kurad", {"bin": kurad, "db": "bench.kh"}, threads, cpus, tmp))
        elif n == "kura-tree":
            out.append(Server(label, "kurad", {"bin": kurad, "db": "bench.kb"}, threads, cpus, tmp))
        else:
            sys.exit("run.py: unknown server '%s' (memcached, kura-cache, kura-hash, kura-tree)" % n)
    return out

# ------------------------------------------------------------- network part

def cell_args(cell, ops, port, a):
    keys = cell["keys"]
    if keys in ("ops", "set"):
        keys = cell["_keys"]
    args = ["-p", str(port), "--threads", str(a.client_threads),
            "--conns", str(-(-cell["conns"] // a.client_threads)),   # per thread, rounded up
            "--pipeline", str(cell["pipeline"]), "--multiget", str(cell["multiget"]),
            "--ops", str(ops), "--keys", str(keys), "--pattern", cell["pattern"],
            "--key-prefix", cell["prefix"], "--value-size", str(cell["value"]),
            "--ratio", cell["ratio"], "--verify", "--json", "--quiet", "--timeout", "30",
            "--proto", cell.get("proto", "text")]
    if cell["miss"]:
        args += ["--miss-ratio", str(cell["miss"])]
    if cell["prefill"]:
        args.append("--prefill")
    if a.spin:
        args.append("--spin")
    return args


def scaled_plan(scale, full):
    plan = []
    written = {}
    for c in PLAN:
        c = dict(c)
        ops = c["nominal"] if full else max(1000, min(c["nominal"], int(round(c["ops"] * scale))))
        c["run_ops"] = ops
        if c["keys"] == "ops":
            c["_keys"] = ops
            written[c["prefix"]] = ops
        elif c["keys"] == "set":
            c["_keys"] = written.get(c["prefix"], ops)
        plan.append(c)
    # the pipelined and multi-get cells read what set-c20 wrote
    for c in plan:
        if c["prefix"] == "a20:" and isinstance(c["keys"], int):
            c["keys"] = min(c["keys"], written.get("a20:", c["keys"]))
    return plan


def run_one(server, c, a, rep, raw, failures):
    if not server.alive():
        failures.append("%s rep %d %s: server not running (%s)" % (
            server.name, rep, c["id"], server.death()))
        raw.append(dict(rep=rep, server=server.name, cell=c["id"], status="server_died"))
        return
    cmd = taskset(a.client_cpus) + [a.bench] + cell_args(c, c["run_ops"], server.port, a)
    # Let the kernel finish writing back what the previous run (a disk-backed
    # server) left dirty, so that its flusher threads do not steal this
    # run's CPU: that made every server after a hash-file run look slow.
    os.sync()
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    res = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            try:
                res = json.loads(line)
            except ValueError:
                pass
    row = dict(rep=rep, server=server.name, cell=c["id"], status=res.get("status", "failed"),
               rc=p.returncode, ops=res.get("ops", 0), seconds=res.get("seconds", 0),
               ops_per_sec=res.get("ops_per_sec", 0), p50_us=res.get("p50_us", 0),
               p99_us=res.get("p99_us", 0), p999_us=res.get("p999_us", 0),
               hits=res.get("hits", 0), misses=res.get("misses", 0),
               errors=res.get("errors", 0), mismatches=res.get("mismatches", 0),
               wall_s=round(time.monotonic() - t0, 3))
    raw.append(row)
    if p.returncode != 0:
        failures.append("%s rep %d %s: kura-bench exit %d: %s" %
                        (server.name, rep, c["id"], p.returncode, p.stderr.strip()[-300:]))
    if a.verbose:
        log("    %-12s %-14s %10s ops/s  p50 %7.1f  p99 %7.1f us  %s" %
            (server.name, c["id"], fmt_rate(row["ops_per_sec"]), row["p50_us"],
             row["p99_us"], row["status"]))


def run_rep(servers, plan, a, rep, raw, failures):
    """Starts every server fresh (all stopped but the one measured), then runs
    each cell against each server in turn, so that the servers compared in a
    cell are measured seconds apart; the order of the servers alternates by
    rep."""
    up = []
    try:
        for s in servers:
            if s.start():
                up.append(s)
            else:
                failures.append("%s rep %d: server did not start: %s" % (s.name, rep, s.error))
                log("  %-12s did not start: %s" % (s.name, s.error))
        order = up if rep % 2 else list(reversed(up))
        for c in plan:
            for s in order:
                # The servers not measured are stopped (SIGSTOP): a hash
                # file's background work (checkpoints, compaction) after its
                # own cell must not run on the server CPU during another
                # server's cell.  It resumes, and is paid for, in its own.
                others = [o for o in up if o is not s and o.alive()]
                for o in others:
                    o.proc.send_signal(signal.SIGSTOP)
                try:
                    run_one(s, c, a, rep, raw, failures)
                finally:
                    for o in others:
                        o.proc.send_signal(signal.SIGCONT)
    finally:
        for s in up:
            s.stop()


def summarize_net(plan, servers, raw):
    base = servers[0].name
    rows = []
    for c in plan:
        for s in servers:
            runs = [r for r in raw if r["cell"] == c["id"] and r["server"] == s.name
                    and r.get("status") == "ok"]
            if not runs:
                continue
            rates = [r["ops_per_sec"] for r in runs]
            rows.append(dict(cell=c["id"], title=c["title"], ops=c["run_ops"], nominal=c["nominal"],
                             server=s.name, runs=len(runs), median_ops_s=round(median(rates), 1),
                             min_ops_s=min(rates), max_ops_s=max(rates),
                             spread_pct=round(spread_pct(rates), 1),
                             p50_us=median([r["p50_us"] for r in runs]),
                             p99_us=median([r["p99_us"] for r in runs]),
                             p999_us=median([r["p999_us"] for r in runs])))
    # the ratio: the median over repetitions of (this server / the baseline in the same rep)
    for r in rows:
        pairs = []
        for x in raw:
            if x["cell"] == r["cell"] and x["server"] == r["server"] and x.get("status") == "ok":
                b = [y for y in raw if y["cell"] == r["cell"] and y["server"] == base
                     and y["rep"] == x["rep"] and y.get("status") == "ok"]
                if b and b[0]["ops_per_sec"]:
                    pairs.append(x["ops_per_sec"] / b[0]["ops_per_sec"])
        r["ratio"] = round(median(pairs), 3) if pairs else ""
    return rows


def net_markdown(plan, servers, rows):
    names = [s.name for s in servers]
    base = names[0]
    head = "| cell | ops run (nominal) | " + " | ".join(
        "%s ops/s (spread)" % n for n in names) + " | " + " | ".join(
        "%s/%s" % (n, base) for n in names[1:]) + " | " + " | ".join(
        "%s p50/p99/p99.9 us" % n for n in names) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(names) + len(names) - 1)]
    for c in plan:
        cells = ["%s" % c["title"], "%s (%s)" % (fmt_ops(c["run_ops"]), fmt_ops(c["nominal"]))]
        by = {r["server"]: r for r in rows if r["cell"] == c["id"]}
        for n in names:
            r = by.get(n)
            cells.append("%s ±%.0f%%" % (fmt_rate(r["median_ops_s"]), r["spread_pct"] / 2) if r else "failed")
        for n in names[1:]:
            r = by.get(n)
            cells.append("**%.2f**" % r["ratio"] if r and r["ratio"] != "" else "-")
        for n in names:
            r = by.get(n)
            cells.append("%.0f / %.0f / %.0f" % (r["p50_us"], r["p99_us"], r["p999_us"]) if r else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)

# -------------------------------------------------------------- engine part

def parse_kc_phases(out):
    """Kyoto test tools print 'phase heading:' lines each followed later by 'time: X'."""
    phases, cur = {}, None
    for line in out.splitlines():
        if re.match(r"^[a-z ]+:$", line):
            cur = line[:-1]
        m = re.match(r"^time: ([0-9.]+)", line)
        if m and cur:
            phases[cur] = phases.get(cur, 0.0) + float(m.group(1))
            cur = None
    return phases


def timed(cmd, cwd, cpus):
    t0 = time.monotonic()
    p = subprocess.run(taskset(cpus) + cmd, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return p.returncode, time.monotonic() - t0, p.stdout


def engine_tools(a):
    """(name, family, write-fn, read-fn) for every tool that is installed or built.
    Each fn returns seconds, or raises RuntimeError."""
    n = str(a.engine_rnum)
    tools = []

    def wall(cmd):
        def f(d):
            rc, secs, out = timed(cmd, d, a.server_cpus)
            if rc != 0:
                raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), rc, out[-300:]))
            return secs
        return f

    def kc(cmd, phase_names):
        def f(d):
            rc, secs, out = timed(cmd, d, a.server_cpus)
            if rc != 0:
                raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), rc, out[-300:]))
            ph = parse_kc_phases(out)
            return sum(ph.get(p, 0.0) for p in phase_names)
        return f

    eb = os.path.join(a.build, "kura-enginebench")
    if os.access(eb, os.X_OK):
        for name, db in (("kura-cache", "*"), ("kura-hash", "bench.kh"), ("kura-tree", "bench.kb")):
            tools.append(dict(name=name, family={"*": "memory", "bench.kh": "hash",
                                                  "bench.kb": "tree"}[db],
                              cmd="kura-enginebench %s %s" % (db, n), kura=True, db=db))
    if shutil.which("tchtest"):
        tools.append(dict(name="tc-hash", family="hash", kura=False,
                          cmd="tchtest write casket.tch %s ; tchtest read casket.tch" % n,
                          write=wall(["tchtest", "write", "casket.tch", n]),
                          read=wall(["tchtest", "read", "casket.tch"])))
    if shutil.which("tcbtest"):
        tools.append(dict(name="tc-btree", family="tree", kura=False,
                          cmd="tcbtest write casket.tcb %s ; tcbtest read casket.tcb" % n,
                          write=wall(["tcbtest", "write", "casket.tcb", n]),
                          read=wall(["tcbtest", "read", "casket.tcb"])))
    if shutil.which("kchashtest"):
        tools.append(dict(name="kc-hash", family="hash", kura=False,
                          cmd="kchashtest order -set casket.kch %s ; kchashtest order -get casket.kch %s" % (n, n),
                          write=wall(["kchashtest", "order", "-set", "casket.kch", n]),
                          read=wall(["kchashtest", "order", "-get", "casket.kch", n])))
    if shutil.which("kctreetest"):
        tools.append(dict(name="kc-tree", family="tree", kura=False,
                          cmd="kctreetest order -set casket.kct %s ; kctreetest order -get casket.kct %s" % (n, n),
                          write=wall(["kctreetest", "order", "-set", "casket.kct", n]),
                          read=wall(["kctreetest", "order", "-get", "casket.kct", n])))
    if shutil.which("kccachetest"):
        # one process (in memory): the set and get phases as the tool times them
        tools.append(dict(name="kc-cache", family="memory", kura=False, both=True,
                          cmd="kccachetest order %s  (setting / getting phases)" % n,
                          both_cmd=["kccachetest", "order", n]))
    return tools


def run_engine(a, tmp, raw, failures, skipped):
    tools = engine_tools(a)
    eb = os.path.join(a.build, "kura-enginebench")
    avail = []
    for t in tools:
        if t.get("kura"):
            d = tempfile.mkdtemp(prefix="engine-", dir=tmp)
            rc, _, out = timed([eb, t["db"], "1000"], d, a.server_cpus)
            shutil.rmtree(d, ignore_errors=True)
            if rc != 0:
                skipped.append("%s (engine): %s" % (t["name"], out.strip().splitlines()[-1] if out.strip() else "exit %d" % rc))
                continue
        avail.append(t)
    for rep in range(1, a.reps + 1):
        for t in avail:
            d = tempfile.mkdtemp(prefix="engine-", dir=tmp)
            try:
                if t.get("kura"):
                    rc, _, out = timed([eb, t["db"], str(a.engine_rnum)], d, a.server_cpus)
                    m = re.search(r"write_s=([0-9.]+) read_s=([0-9.]+).*put_s=([0-9.]+) "
                                  r"get_s=([0-9.]+)", out)
                    if rc != 0 or not m:
                        raise RuntimeError("kura-enginebench %s: exit %d: %s" % (t["db"], rc, out[-300:]))
                    w, r = float(m.group(1)), float(m.group(2))
                    if t["family"] == "memory":     # like kccachetest: the phases alone
                        w, r = float(m.group(3)), float(m.group(4))
                elif t.get("both"):
                    rc, _, out = timed(t["both_cmd"], d, a.server_cpus)
                    if rc != 0:
                        raise RuntimeError("%s: exit %d" % (t["cmd"], rc))
                    ph = parse_kc_phases(out)
                    w, r = ph.get("setting records", 0.0), ph.get("getting records", 0.0)
                else:
                    w = t["write"](d)
                    r = t["read"](d)
                raw.append(dict(rep=rep, tool=t["name"], family=t["family"], rnum=a.engine_rnum,
                                write_s=round(w, 4), read_s=round(r, 4)))
                if a.verbose:
                    log("    %-10s write %.3f s  read %.3f s" % (t["name"], w, r))
            except RuntimeError as e:
                failures.append("engine %s rep %d: %s" % (t["name"], rep, e))
            finally:
                shutil.rmtree(d, ignore_errors=True)
    return avail


def summarize_engine(tools, raw):
    rows = []
    for t in tools:
        runs = [r for r in raw if r["tool"] == t["name"]]
        if not runs:
            continue
        w = [r["rnum"] / r["write_s"] for r in runs if r["write_s"] > 0]
        rd = [r["rnum"] / r["read_s"] for r in runs if r["read_s"] > 0]
        rows.append(dict(tool=t["name"], family=t["family"], cmd=t["cmd"], runs=len(runs),
                         write_s=round(median([r["write_s"] for r in runs]), 3),
                         read_s=round(median([r["read_s"] for r in runs]), 3),
                         write_ops_s=round(median(w)), read_ops_s=round(median(rd)),
                         write_spread_pct=round(spread_pct(w), 1),
                         read_spread_pct=round(spread_pct(rd), 1)))
    # ratios: each kura backend against the Cabinet tools of its family
    for r in rows:
        r["vs"] = ""
        if r["tool"].startswith("kura-"):
            parts = []
            for o in rows:
                if o["family"] == r["family"] and not o["tool"].startswith("kura-"):
                    parts.append("%s: write %.2f, read %.2f" % (
                        o["tool"], r["write_ops_s"] / o["write_ops_s"], r["read_ops_s"] / o["read_ops_s"]))
            r["vs"] = "; ".join(parts)
    return rows


def engine_markdown(rows, rnum):
    lines = ["| store | family | write %s recs | read | write ops/s (spread) | read ops/s (spread) | kura / Cabinet | command |" % fmt_ops(rnum),
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %s | %.3f s | %.3f s | %s ±%.0f%% | %s ±%.0f%% | %s | `%s` |" % (
            r["tool"], r["family"], r["write_s"], r["read_s"], fmt_rate(r["write_ops_s"]),
            r["write_spread_pct"] / 2, fmt_rate(r["read_ops_s"]), r["read_spread_pct"] / 2,
            r["vs"] or "-", r["cmd"]))
    return "\n".join(lines)

# ------------------------------------------------------------------- output

def write_csv(path, rows):
    if not rows:
        return
    keys = []
    for r in rows:
        for k in r:
            if k not in keys and not k.startswith("_"):
                keys.append(k)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, keys, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def save_results(out, name, rows, raw, md):
    """A script's results: out/NAME.csv (its rows), NAME-runs.csv (every
    run) and NAME.md (its part of docs/benchmarks.md)."""
    write_csv(os.path.join(out, name + ".csv"), rows)
    write_csv(os.path.join(out, name + "-runs.csv"), raw)
    with open(os.path.join(out, name + ".md"), "w") as f:
        f.write(md)


def gnuplot_bars(dat_rows, series, out_png, title, ylabel, logscale=True, yformat="%.0s%c"):
    """dat_rows: [(label, [value per series])]; yformat: the y tics' gnuplot format
    (the default: 1k, 10k...; "%.1f" for ratios)."""
    if not shutil.which("gnuplot") or not dat_rows:
        return False
    with tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False) as f:
        f.write("label " + " ".join('"%s"' % s for s in series) + "\n")
        for label, vals in dat_rows:
            f.write('"%s" %s\n' % (label, " ".join("%g" % v if v == v else "NaN" for v in vals)))
        dat = f.name
    cols = " , ".join("'%s' using %d:xtic(1) title columnhead" % (dat, i + 2) if i == 0 else
                      "'' using %d title columnhead" % (i + 2) for i in range(len(series)))
    script = """
set terminal pngcairo size 1400,650 font ",10"
set output '%s'
set title '%s'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set xtics rotate by -35 scale 0
set ylabel '%s'
set grid ytics
set format y '%s'
set key top left
set bmargin 8
%s
set yrange [%s:*]
plot %s
""" % (out_png, title, ylabel, yformat, "set logscale y" if logscale else "", "1000" if logscale else "0", cols)
    p = subprocess.run(["gnuplot"], input=script, text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    os.unlink(dat)
    if p.returncode != 0:
        log("gnuplot failed: " + p.stderr[-500:])
        return False
    return True


def splice_docs(md, b="<!-- BEGIN RESULTS (bench/run.py rewrites this part) -->",
                e="<!-- END RESULTS -->"):
    """Puts md between the markers b and e of docs/benchmarks.md."""
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    try:
        text = open(path).read()
    except OSError:
        return False
    i, j = text.find(b), text.find(e)
    if i < 0 or j < i:
        return False
    text = text[:i + len(b)] + "\n" + md.rstrip() + "\n" + text[j:]
    with open(path, "w") as f:
        f.write(text)
    return True

# --------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="where kurad, kura-bench and kura-enginebench are (default build/)")
    ap.add_argument("--servers", default="memcached,kura-cache,kura-hash,kura-tree",
                    help="comma list of memcached, kura-cache, kura-hash, kura-tree; the first is "
                         "the baseline of the ratios; a name given twice runs twice "
                         "(default: %(default)s; unavailable kura backends are skipped)")
    ap.add_argument("--self", action="store_true",
                    help="memcached against itself (= --servers memcached,memcached): "
                         "validates the pipeline before kurad exists; ratios should be ~1")
    ap.add_argument("--only", choices=["net", "engine", "footprint"], help="run only one part")
    ap.add_argument("--footprint", action="store_true",
                    help="then bench/footprint.py: issue 23's figures (engine in random order, "
                         "20 KB gets' server CPU, -th 2 scaling, 20 KB sets against dd; "
                         "about 5 more minutes)")
    ap.add_argument("--cells", default=None,
                    help="comma list of network cell ids (or id prefixes, e.g. meta-,bin-) to run")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per cell (default 3)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply the default op counts (capped at the nominal ones)")
    ap.add_argument("--full", action="store_true",
                    help="the nominal op counts (1M keys etc.); takes far longer than 10 min here")
    ap.add_argument("--quick", action="store_true", help="1 rep, scale 0.1, engine 100k records")
    ap.add_argument("--threads", type=int, default=0,
                    help="server threads, the same for every server (default: CPUs in the server set)")
    ap.add_argument("--server-cpus", default=None, help="taskset list for servers (default 0)")
    ap.add_argument("--client-cpus", default=None, help="taskset list for kura-bench (default 1)")
    ap.add_argument("--client-threads", type=int, default=1)
    ap.add_argument("--no-spin", dest="spin", action="store_false",
                    help="let kura-bench sleep in epoll_wait (default: it busy-polls on its own CPU)")
    ap.add_argument("--budget", type=float, default=570,
                    help="seconds; later repetitions are dropped (and said so) to stay within it")
    ap.add_argument("--engine-rnum", type=int, default=ENGINE_RNUM)
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    ap.add_argument("--out", default=RESULTS, help="results directory (default bench/results)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every run")
    a = ap.parse_args()

    t_start = time.monotonic()
    ncpu = os.cpu_count() or 1
    pin_defaults(a)
    if a.threads <= 0:
        a.threads = max(1, len(expand_cpus(a.server_cpus)) if a.server_cpus else ncpu)
    if a.quick:
        a.reps, a.scale = 1, a.scale * 0.1
        a.engine_rnum = min(a.engine_rnum, 100000)
    a.build = os.path.abspath(a.build)
    a.bench = os.path.join(a.build, "kura-bench")
    names = ["memcached", "memcached"] if a.self else [s for s in a.servers.split(",") if s]
    os.makedirs(a.out, exist_ok=True)
    tmp_root = os.path.join(ROOT, "bench", "results", "tmp")
    os.makedirs(tmp_root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="run-", dir=tmp_root)
    info = machine_info()
    load_before = loadavg()
    failures, skipped, notes = [], [], []
    log("kura bench: %s, %d cores%s; servers on CPU %s (%d thread%s), kura-bench on CPU %s%s" % (
        info["cpu"], info["cores"], " (%s guest)" % info["virt"] if info["virt"] else "",
        a.server_cpus or "any", a.threads, "s" if a.threads > 1 else "", a.client_cpus or "any",
        ", busy-polling" if a.spin else ""))

    try:
        # ---- engine
        eng_rows, eng_raw = [], []
        if a.only not in ("net", "footprint"):
            log("\n== engine: %s records, 8-byte keys and values, %d rep(s)" % (fmt_ops(a.engine_rnum), a.reps))
            tools = run_engine(a, tmp, eng_raw, failures, skipped)
            eng_rows = summarize_engine(tools, eng_raw)
            if eng_rows:
                log(engine_markdown(eng_rows, a.engine_rnum))

        # ---- network
        net_rows, net_raw, servers, plan = [], [], [], []
        if a.only not in ("engine", "footprint"):
            if not os.access(a.bench, os.X_OK):
                sys.exit("run.py: %s not built (make %s)" % (a.bench, os.path.relpath(a.bench, ROOT)))
            cand = make_servers(names, a.build, a.threads, a.server_cpus, tmp)
            for s in cand:
                if s.kind == "kurad" and not os.access(s.args["bin"], os.X_OK):
                    skipped.append("%s: %s not built" % (s.name, s.args["bin"]))
                    continue
                if s.start():
                    s.stop()
                    servers.append(s)
                else:
                    skipped.append("%s: %s" % (s.name, s.error))
            for sk in skipped:
                log("skipped: " + sk)
            if not servers:
                sys.exit("run.py: no server could be started")
            scale = a.scale
            if len(servers) > 3 and not a.full:
                scale *= 3.0 / len(servers)
                notes.append("op counts scaled by a further 3/%d for %d servers" % (len(servers), len(servers)))
            plan = scaled_plan(scale, a.full)
            if a.cells:
                want = [w for w in a.cells.split(",") if w]
                plan = [c for c in plan if any(c["id"] == w or (w.endswith("-") and c["id"].startswith(w)) for w in want)]
            log("\n== network: %d cells x %d server(s) x %d rep(s)" % (len(plan), len(servers), a.reps))
            for rep in range(1, a.reps + 1):
                t_rep = time.monotonic()
                log("-- rep %d/%d (%.0f s elapsed)" % (rep, a.reps, t_rep - t_start))
                run_rep(servers, plan, a, rep, net_raw, failures)
                rep_s = time.monotonic() - t_rep
                if rep < a.reps and time.monotonic() - t_start + rep_s > a.budget:
                    notes.append("stopped after %d of %d repetitions to stay within the %.0f s budget"
                                 % (rep, a.reps, a.budget))
                    log("note: " + notes[-1])
                    break
            net_rows = summarize_net(plan, servers, net_raw)
            log("")
            log(net_markdown(plan, servers, net_rows))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # ---- files
    elapsed = time.monotonic() - t_start
    if net_rows:
        write_csv(os.path.join(a.out, "net.csv"), net_rows)
        write_csv(os.path.join(a.out, "net-runs.csv"), net_raw)
        names_ok = [s.name for s in servers]
        dat = []
        for c in plan:
            by = {r["server"]: r["median_ops_s"] for r in net_rows if r["cell"] == c["id"]}
            dat.append((c["id"], [by.get(n, float("nan")) for n in names_ok]))
        gnuplot_bars(dat, names_ok, os.path.join(a.out, "net.png"),
                     "kura-bench: median ops/s of %d run(s) per cell (%s)" % (a.reps, info["cpu"]),
                     "operations per second (log scale)")
    if eng_rows:
        write_csv(os.path.join(a.out, "engine.csv"), eng_rows)
        write_csv(os.path.join(a.out, "engine-runs.csv"), eng_raw)
        dat = [(r["tool"], [r["write_ops_s"], r["read_ops_s"]]) for r in eng_rows]
        gnuplot_bars(dat, ["write", "read"], os.path.join(a.out, "engine.png"),
                     "in-process write and read of %s records (8-byte keys and values)" % fmt_ops(a.engine_rnum),
                     "records per second", logscale=False)

    md = []
    md.append("_Generated by `bench/run.py` on %s in %.0f s._\n" % (
        datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), elapsed))
    md.append("**Machine:** %s, %d cores%s, %d MiB RAM, Linux %s, Debian %s, %s. "
              "Load average (1 min) %s before the run, %s after: anything above 0 is other "
              "work sharing the cores, and widens the spreads.\n" % (
        info["cpu"], info["cores"], " (%s guest)" % info["virt"] if info["virt"] else "",
        info["mem_mb"], info["kernel"], info["debian"], info["memcached"], load_before, loadavg()))
    if net_rows:
        md.append("### Network: kura-bench against each server\n")
        md.append("Servers pinned to CPU %s with %d worker thread(s) each; kura-bench (%d thread) "
                  "pinned to CPU %s%s. Median of %d run(s); ± is half the spread (max-min) "
                  "relative to the median; a ratio is the median over repetitions of the two servers' "
                  "ops/s in the same repetition (measured seconds apart: every cell runs against "
                  "each server in turn, all servers started fresh for each repetition). "
                  "Every run used `--verify`.\n" % (
                      a.server_cpus or "any", a.threads, a.client_threads, a.client_cpus or "any",
                      ", busy-polling" if a.spin else "", a.reps))
        for s in servers:
            md.append("- `%s`: `%s`" % (s.name, s.cmdline))
        md.append("")
        md.append(net_markdown(plan, servers, net_rows))
        md.append("\n![ops/s per cell](../bench/results/net.png)\n")
    if eng_rows:
        md.append("### Engine: in-process, %s records of 8-byte keys and values\n" % fmt_ops(a.engine_rnum))
        md.append("Write = open, put every record, close; read = open, get every record, close "
                  "(the in-memory stores: the put and get loops alone, in one process). Median of %d run(s), pinned to the server CPU. "
                  "Cabinet tools timed by wall clock around each command (Kyoto's cache: the "
                  "phase times it prints).\n" % a.reps)
        md.append(engine_markdown(eng_rows, a.engine_rnum))
        md.append("\n![engine](../bench/results/engine.png)\n")
    if skipped:
        md.append("Skipped: " + "; ".join(skipped) + ".\n")
    if notes:
        md.append("Notes: " + "; ".join(notes) + ".\n")
    if failures:
        md.append("**Failures:**\n\n" + "\n".join("- " + f.replace("\n", " ") for f in failures) + "\n")
    md_text = "\n".join(md)
    if a.only != "footprint":
        with open(os.path.join(a.out, "latest.md"), "w") as f:
            f.write(md_text)
        if not a.no_docs and os.path.abspath(a.out) == os.path.abspath(RESULTS):
            if splice_docs(md_text):
                log("\ndocs/benchmarks.md updated")
    if a.footprint or a.only == "footprint":
        # its own results (footprint.md, the FOOTPRINT part of benchmarks.md)
        log("\n== issue 23's figures (bench/footprint.py)")
        cmd = [sys.executable, os.path.join(ROOT, "bench", "footprint.py"), "--build", a.build,
               "--out", a.out, "--server-cpus", a.server_cpus, "--client-cpus", a.client_cpus]
        cmd += (["--quick"] if a.quick else []) + (["--no-docs"] if a.no_docs else [])
        cmd += ["-v"] if a.verbose else []
        if subprocess.run(cmd).returncode != 0:
            failures.append("bench/footprint.py failed (its output above)")
    log("\nresults in %s (%.0f s)" % (os.path.relpath(a.out, ROOT), elapsed))
    for sk in skipped:
        log("skipped: " + sk)
    for n in notes:
        log("note: " + n)
    if failures:
        log("FAILURES:")
        for f in failures:
            log("  " + f)
        return 1
    return 0


def output_args(ap, client):
    """The options bench/footprint.py and bench/cache.py share: where the
    servers and the client run, and where the results go."""
    ap.add_argument("--server-cpus", default=None, help="taskset list for servers (default 0)")
    ap.add_argument("--client-cpus", default=None,
                    help="taskset list for %s (default 1)" % client)
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("-v", "--verbose", action="store_true")


def pin_defaults(a):
    """--server-cpus and --client-cpus left out: CPU 0 and CPU 1 on a machine
    of two CPUs or more, else anywhere."""
    ncpu = os.cpu_count() or 1
    if a.server_cpus is None:
        a.server_cpus = "0" if ncpu >= 2 else ""
    if a.client_cpus is None:
        a.client_cpus = "1" if ncpu >= 2 else ""


def loadavg():
    try:
        return open("/proc/loadavg").read().split()[0]
    except (OSError, IndexError):
        return "?"


def expand_cpus(spec):
    out = []
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out += list(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


if __name__ == "__main__":
    sys.exit(main())
