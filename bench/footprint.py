#!/usr/bin/python3
"""Issue 23's speed figures, each beside its yardstick in the same run.

    bench/footprint.py [--parts engine,cpu,scale,disk] [--reps 3] [--quick]
    bench/run.py --footprint          # the same, after run.py's own parts

Four parts, each measuring kura and what it is compared with in turn, in
every repetition, so that a ratio compares runs made seconds apart:

engine  kura-enginebench [-rnd] DB N (hash file and B+ tree) beside
        `kchashtest order [-rnd] -set/-get` and `kctreetest ...` (Kyoto
        Cabinet, Debian's kyotocabinet-utils), N = 1M records of 8-byte
        keys and values, key order and random order; the ratio is Kyoto's
        time over kura's (write + read; > 1: kura faster), and beside it the
        same for the processes' CPU time (user + sys), steadier under load;
        a target is met when both ratios meet it.  Kyoto's -rnd
        draws keys at random with repeats (about 63% of N distinct
        records), kura's visits a permutation of all N.
cpu     20 KB gets from kurad's tree and from memcached, one worker each on
        the server CPU, kura-bench on the other: the server process's CPU
        (utime + stime of /proc/PID/stat, all its threads) over the get
        run, divided by the requests.  Ratio kura / memcached.
scale   20 KB tree gets with `kurad -th 2` against `-th 1`, kura-bench with
        two threads, nothing pinned (on a 2-core machine the client shares
        the cores with the server); memcached -t 2 / -t 1 beside, for what
        the machine allows.  With the server's and the client's CPU a get,
        and beside it, for reference, 2 x CPU(-th 1) / CPU(-th 2): what two
        cores of its own would give the server if no time were lost off
        the CPU (a model, not the target's measure).
disk    20 KB sets into kurad's hash file and tree under `-sync interval`
        against `dd if=/dev/zero bs=1M oflag=direct` on the same file system
        (the mean of a dd just before and one just after each kurad run):
        the value bytes over the time of the sets plus kurad's clean stop
        (which syncs), so that what the page cache absorbed is paid for.
        The rate acknowledged to the client, the bytes kurad wrote
        (/proc/PID/io write_bytes) per value byte, and kurad's CPU time over
        the sets' time (near 100%: bound by its one worker's CPU, not by
        the disk) are shown beside, with the share of the time its worker
        spent on a CPU and waiting for one (/proc/PID/task/*/schedstat: on
        a shared machine a server that looks idle is often waiting there) and `dd conv=fdatasync` (through
        the page cache, synced at the end, as kurad writes).  Two more rows:
        the rate over the ceiling of the run, the lower of dd's and
        memcached's (which writes nothing: what the client, the loopback and
        one server CPU allow), and the server CPU a set over memcached's.
        --disk-limit MBPS runs dd and the servers on a disk held to MBPS
        MB/s by the block cgroup (bench/disklimit.py; root): a disk of
        known bandwidth, where a VM's dd would measure the host's cache.

Writes bench/results/footprint.{md,csv,png}, footprint-runs.csv, and the
generated part of docs/benchmarks.md's "Footprint and speed beside Kyoto
Cabinet, memcached and the disk" section (between its FOOTPRINT markers;
only a run of every part rewrites it, since it holds them all).  Exit 1 if a run failed.
"""
import argparse, datetime, json, os, re, resource, shutil, signal, subprocess, sys, tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R          # noqa: E402  (bench/run.py: servers, pinning, plots)
import disklimit         # noqa: E402  (a disk of known bandwidth)

ROOT = R.ROOT
BEGIN = "<!-- BEGIN FOOTPRINT RESULTS (bench/footprint.py rewrites this part) -->"
END = "<!-- END FOOTPRINT RESULTS -->"
VALUE = 20000                       # the 20 KB values
TICK = os.sysconf("SC_CLK_TCK")

log = R.log


def proc_cpu_s(pid):
    """utime + stime of a whole process (all its threads), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK     # fields 14 and 15 of stat(5)


def proc_write_bytes(pid):
    try:
        with open("/proc/%d/io" % pid) as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def proc_threads(pid):
    """{tid: (CPU s, s runnable but waiting for a CPU)} of the process's
    threads, from /proc/PID/task/*/schedstat."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for t in tids:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                run, wait = f.read().split()[:2]
            out[t] = (int(run) / 1e9, int(wait) / 1e9)
        except (OSError, ValueError):
            pass        # a thread that ended meanwhile
    return out


def busiest_thread(before, after):
    """(CPU s, wait s) over the interval of the thread that used the most
    CPU in it (the worker): on a shared machine a server that is neither on
    a CPU nor asleep is waiting for one, and its CPU time over the wall
    clock alone would call it idle."""
    best = None
    for t, (run, wait) in after.items():
        r0, w0 = before.get(t, (0.0, 0.0))
        if best is None or run - r0 > best[0]:
            best = (run - r0, wait - w0)
    return best


def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def cpu_timed(cmd, cwd, cpus):
    """run.py's timed(), and the CPU (user + sys) the command used: steadier
    than the wall clock while other work shares the cores."""
    c0 = children_cpu_s()
    rc, secs, out = R.timed(cmd, cwd, cpus)
    return rc, secs, out, children_cpu_s() - c0


def bench_run(a, port, args, cpus, threads=1, conns=16):
    """One kura-bench run; returns its JSON result (raises on failure)."""
    cmd = R.taskset(cpus) + [a.bench, "-p", str(port), "--threads", str(threads),
                             "--conns", str(conns), "--json", "--quiet", "--timeout", "60"] + args
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    res = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            res = json.loads(line)
    if p.returncode != 0 or res.get("status") != "ok":
        raise RuntimeError("kura-bench %s: exit %d: %s" % (" ".join(args), p.returncode,
                                                           p.stderr.strip()[-300:]))
    return res


def settle(pid, deadline_s=10.0):
    """Polls until the process has used no CPU for 0.3 s (its background work
    after a load is done), or the deadline: what follows is measured alone."""
    end = time.monotonic() + deadline_s
    last, since = proc_cpu_s(pid), time.monotonic()
    while time.monotonic() < end and time.monotonic() - since < 0.3:
        time.sleep(0.05)
        now = proc_cpu_s(pid)
        if now != last:
            last, since = now, time.monotonic()


def fill(a, s, keys, prefix, cpus):
    return bench_run(a, s.port, ["--ratio", "1:0", "--pattern", "seq", "--keys", str(keys),
                                 "--ops", str(keys), "--value-size", str(VALUE),
                                 "--key-prefix", prefix], cpus)


def gets(a, s, keys, ops, prefix, cpus, threads=1, conns=16):
    return bench_run(a, s.port, ["--ratio", "0:1", "--pattern", "uniform", "--keys", str(keys),
                                 "--ops", str(ops), "--value-size", str(VALUE), "--verify",
                                 "--key-prefix", prefix], cpus, threads, conns)


def server(a, name, tmp, threads=1, cpus=None, extra=()):
    """A run.py Server: "memcached", "tree" or "hash" (extra: kurad's)."""
    cpus = a.server_cpus if cpus is None else cpus
    if name == "memcached":
        mc = shutil.which("memcached") or "/usr/bin/memcached"
        return R.Server("memcached -t %d" % threads, "memcached", {"bin": mc}, threads, cpus, tmp)
    db = {"tree": "bench.kb", "hash": "bench.kh"}[name]
    label = "kura-%s -th %d%s" % (name, threads, "".join(" " + x for x in extra))
    return R.Server(label, "kurad", {"bin": a.kurad, "db": db, "extra": list(extra)},
                    threads, cpus, tmp)


def started(s):
    if not s.start():
        raise RuntimeError("%s did not start: %s" % (s.name, s.error))
    return s

# ------------------------------------------------------------------ parts


def part_engine(a, tmp, rep, raw):
    n = str(a.engine_rnum)
    eb = os.path.join(a.build, "kura-enginebench")
    for order in ("key", "random"):
        rnd = ["-rnd"] if order == "random" else []
        for family, kdb, tool, kfile in (("hash", "bench.kh", "kchashtest", "casket.kch"),
                                         ("tree", "bench.kb", "kctreetest", "casket.kct")):
            d = tempfile.mkdtemp(prefix="engine-", dir=tmp)
            try:
                rc, _, out, kcpu = cpu_timed([eb] + rnd + [kdb, n], d, a.server_cpus)
                m = re.search(r"write_s=([0-9.]+) read_s=([0-9.]+)", out)
                if rc != 0 or not m:
                    raise RuntimeError("kura-enginebench %s: exit %d: %s" % (kdb, rc, out[-300:]))
                kw, kr = float(m.group(1)), float(m.group(2))
                if not shutil.which(tool):
                    raise RuntimeError("%s missing (apt-get install kyotocabinet-utils)" % tool)
                times, ccpu = [], 0.0
                for phase in ("-set", "-get"):
                    rc, secs, out, c = cpu_timed([tool, "order"] + rnd + [phase, kfile, n], d,
                                                 a.server_cpus)
                    if rc != 0:
                        raise RuntimeError("%s %s: exit %d: %s" % (tool, phase, rc, out[-300:]))
                    times.append(secs)
                    ccpu += c
            finally:
                shutil.rmtree(d, ignore_errors=True)
            raw.append(dict(rep=rep, part="engine", cell="%s-%s" % (family, order),
                            kura_write_s=kw, kura_read_s=kr, kc_write_s=times[0],
                            kc_read_s=times[1], kura_cpu_s=kcpu, kc_cpu_s=ccpu,
                            cpu_ratio=ccpu / kcpu if kcpu else float("nan"),
                            ratio=(times[0] + times[1]) / (kw + kr)))
            if a.verbose:
                log("    engine %s %s: kura %.3f + %.3f s (CPU %.2f s), %s %.3f + %.3f s (CPU %.2f s)"
                    % (family, order, kw, kr, kcpu, tool, times[0], times[1], ccpu))


def part_cpu(a, tmp, rep, raw):
    keys = a.keys
    order = ["memcached", "tree"] if rep % 2 else ["tree", "memcached"]
    got = {}
    for name in order:
        s = started(server(a, name, tmp))
        try:
            fill(a, s, keys, "f:", a.client_cpus)
            settle(s.proc.pid)
            c0 = proc_cpu_s(s.proc.pid)
            res = gets(a, s, keys, a.get_ops, "f:", a.client_cpus)
            c1 = proc_cpu_s(s.proc.pid)
        finally:
            s.stop()
        got[name] = dict(cpu_s=c1 - c0, ops=res["ops"], ops_s=res["ops_per_sec"])
        if a.verbose:
            log("    cpu %-9s %.2f s CPU for %d gets (%.1f us each), %.0f ops/s" % (
                name, c1 - c0, res["ops"], 1e6 * (c1 - c0) / res["ops"], res["ops_per_sec"]))
    per = {k: v["cpu_s"] / v["ops"] for k, v in got.items()}
    raw.append(dict(rep=rep, part="cpu", cell="20k-get-cpu",
                    kura_us=1e6 * per["tree"], memcached_us=1e6 * per["memcached"],
                    kura_ops_s=got["tree"]["ops_s"], memcached_ops_s=got["memcached"]["ops_s"],
                    ratio=per["tree"] / per["memcached"] if per["memcached"] else float("nan")))


def part_scale(a, tmp, rep, raw):
    keys = a.keys
    for name in ("tree", "memcached"):
        rate, srv, cli = {}, {}, {}
        for th in ((1, 2) if rep % 2 else (2, 1)):
            s = started(server(a, name, tmp, threads=th, cpus=""))
            try:
                fill(a, s, keys, "g:", "")
                settle(s.proc.pid)
                c0, k0 = proc_cpu_s(s.proc.pid), children_cpu_s()
                res = gets(a, s, keys, a.get_ops, "g:", "", threads=2, conns=8)
                c1, k1 = proc_cpu_s(s.proc.pid), children_cpu_s()
            finally:
                s.stop()
            rate[th] = res["ops_per_sec"]
            srv[th], cli[th] = (c1 - c0) / res["ops"], (k1 - k0) / res["ops"]
            if a.verbose:
                log("    scale %-9s th %d: %.0f ops/s, server %.1f us and client %.1f us "
                    "of CPU a get" % (name, th, rate[th], 1e6 * srv[th], 1e6 * cli[th]))
        # The client costs nearly what the server does a get (shown), and both
        # share the two cores with whatever else runs, so the rates say more
        # about the machine than about the server.  The server's CPU a get at
        # -th 2 against -th 1 says what two cores of its own would give it:
        # 2 x cpu(-th 1) / cpu(-th 2), a projection (it cannot see time lost
        # off the CPU, e.g. in lock waits; in-process gets show those:
        # kura-enginebench -th 2).
        raw.append(dict(rep=rep, part="scale", cell="20k-get-th2-" + name, th1_ops_s=rate[1],
                        th2_ops_s=rate[2], ratio=rate[2] / rate[1],
                        th1_server_us=1e6 * srv[1], th2_server_us=1e6 * srv[2],
                        client_us=1e6 * cli[1],
                        projected=2 * srv[1] / srv[2] if srv[2] else ""))


def dd_rate(a, tmp, flag="oflag=direct"):
    """dd's bytes a second writing dd_mib MiB: `oflag=direct` (the issue's
    yardstick: the device, no page cache) or `conv=fdatasync` (written
    through the page cache and synced once at the end, as kurad writes)."""
    path = os.path.join(tmp, "dd.bin")
    cmd = ["dd", "if=/dev/zero", "of=" + path, "bs=1M", "count=%d" % a.dd_mib, flag]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        os.unlink(path)
    except OSError:
        pass
    m = re.search(r"^(\d+) bytes .* copied, ([0-9.]+) s", p.stdout, re.M)
    if p.returncode != 0 or not m:
        raise RuntimeError("dd: exit %d: %s" % (p.returncode, p.stdout[-300:]))
    return int(m.group(1)) / float(m.group(2))


def clean_stop_s(s, deadline_s=300):
    """SIGTERM and the time until kurad has synced, closed and exited."""
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    try:
        s.proc.wait(deadline_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError("%s: no clean stop within %d s" % (s.name, deadline_s))
    if s.proc.returncode != 0:
        raise RuntimeError("%s: clean stop exited %d" % (s.name, s.proc.returncode))
    return time.monotonic() - t0


def part_disk(a, tmp, rep, raw):
    if not a.disk_limit:
        return disk_runs(a, tmp, rep, raw, None)
    with disklimit.limited(tmp, a.disk_limit) as lim:
        return disk_runs(a, tmp, rep, raw, lim)


def disk_runs(a, tmp, rep, raw, lim):
    # The disk of a shared VM swings by factors from minute to minute: each kurad
    # run is compared with the mean of the dd just before and just after it.
    # memcached under the same sets (no disk) shows what the server CPU, the
    # client and the loopback allow on this machine at the time; the ceiling
    # of a run is the lower of the two (figures() pairs them by repetition).
    def dds():
        os.sync()
        return dd_rate(a, tmp), dd_rate(a, tmp, "conv=fdatasync")
    dd = [dds()]
    names = ("hash", "tree", "memcached")
    for name in (names if rep % 2 else names[::-1]):
        os.sync()                       # others' dirty pages are not this run's to write
        s = started(server(a, name, tmp, extra=("-sync", "interval")))
        try:
            pid = s.proc.pid
            l0 = lim.written() if lim else 0
            w0, c0, t0 = proc_write_bytes(pid), proc_cpu_s(pid), proc_threads(pid)
            res = fill(a, s, a.set_keys, "h:", a.client_cpus)
            w1, c1, t1 = proc_write_bytes(pid), proc_cpu_s(pid), proc_threads(pid)
            worker = busiest_thread(t0, t1)
            # in ns, where stat's ticks are 10 ms: a toy run's sets take a few ticks
            threads_cpu = sum(r for r, _ in t1.values()) - sum(r for r, _ in t0.values())
            stop_s = clean_stop_s(s) if name != "memcached" else 0.0
            # what the limit let through over what the server wrote, its stop
            # included (its clean stop's syncs; the process is gone after it)
            w_end = proc_write_bytes(pid) if name == "memcached" else w1
            limited = (lim.written() - l0) / (w_end - w0) if lim and w_end > w0 else ""
        finally:
            s.stop()
        dd.append(dds())
        disk = (dd[-2][0] + dd[-1][0]) / 2
        buffered = (dd[-2][1] + dd[-1][1]) / 2
        vbytes = res["ops"] * VALUE
        secs = res["seconds"] + stop_s
        raw.append(dict(rep=rep, part="disk", cell="20k-set-" + name, disk_bytes_s=disk,
                        dd_fdatasync_bytes_s=buffered,
                        acked_bytes_s=vbytes / res["seconds"], durable_bytes_s=vbytes / secs,
                        stop_s=stop_s, ops_s=res["ops_per_sec"],
                        # near 1: the sets are bound by the server's one CPU, not by the disk
                        server_busy=(c1 - c0) / res["seconds"],
                        # its busiest thread (the worker): on a CPU, and runnable but
                        # waiting for one; the rest of the time it slept (for the client,
                        # the disk or a lock).  Busy + waiting near 1 is a server starved
                        # by the machine's other work, not an idle one
                        worker_busy=worker[0] / res["seconds"] if worker else "",
                        worker_runq=worker[1] / res["seconds"] if worker else "",
                        cpu_us_per_set=1e6 * (threads_cpu if t1 else c1 - c0) / res["ops"],
                        written_per_value_byte=(w1 - w0) / vbytes if w0 >= 0 and w1 >= 0 else "",
                        through_limit=limited,
                        ratio=vbytes / secs / disk))
        if a.verbose:
            log("    disk %-4s %.0f MB/s acked, %.0f MB/s to disk (stop %.2f s), dd %.0f MB/s "
                "(conv=fdatasync %.0f), server CPU %.0f%% (%.1f us a set), worker on a CPU %s "
                "and waiting for one %s" % (
                    name, vbytes / res["seconds"] / 1e6, vbytes / secs / 1e6, stop_s,
                    disk / 1e6, buffered / 1e6, 100 * (c1 - c0) / res["seconds"],
                    1e6 * (threads_cpu if t1 else c1 - c0) / res["ops"],
                    "%.0f%%" % (100 * worker[0] / res["seconds"]) if worker else "?",
                    "%.0f%%" % (100 * worker[1] / res["seconds"]) if worker else "?"))

# ------------------------------------------------------------------ summary


def figures(raw, a):
    """One row per figure: the medians over the repetitions and the target."""
    def med(rows, k):
        return R.median([r[k] for r in rows])
    rows = []

    def add(rs, label, what, kura, base, target, op, cmd, also=None):
        """target None: a figure shown for reference, with no target of its own;
        also: a second ratio of the runs (the engine's CPU) that must meet it too"""
        if not rs:
            return
        ratio = med(rs, "ratio")
        met = None if target is None else ratio >= target if op == ">=" else ratio <= target
        if met and also:
            met = med(rs, also) >= target
        rows.append(dict(label=label, figure=what, kura=kura, yardstick=base,
                         ratio=round(ratio, 3),
                         spread_pct=round(R.spread_pct([r["ratio"] for r in rs]), 1),
                         target="%s %g" % ("≥" if op == ">=" else "≤", target) if target else "-",
                         target_value=target or float("nan"),
                         met="-" if met is None else "met" if met else "not met",
                         runs=len(rs), command=cmd))
    n = R.fmt_ops(a.engine_rnum)
    for family, tool in (("hash", "kchashtest"), ("tree", "kctreetest")):
        for order in ("key", "random"):
            rs = [r for r in raw if r["cell"] == "%s-%s" % (family, order)]
            if not rs:
                continue
            flag = " -rnd" if order == "random" else ""
            add(rs, "%s %s order" % (family, order),
                "%s engine, %s records in %s order, write + read: %s time / kura time" % (
                    family, n, order, tool),
                "write %.3f s, read %.3f s; CPU %.2f s" % (
                    med(rs, "kura_write_s"), med(rs, "kura_read_s"), med(rs, "kura_cpu_s")),
                "write %.3f s, read %.3f s; CPU %.2f s (CPU ratio %.2f)" % (
                    med(rs, "kc_write_s"), med(rs, "kc_read_s"), med(rs, "kc_cpu_s"),
                    med(rs, "cpu_ratio")),
                1.5, ">=",
                "kura-enginebench%s bench.k%s %d ; %s order%s -set/-get casket.kc%s %d" % (
                    flag, "h" if family == "hash" else "b", a.engine_rnum, tool, flag,
                    "h" if family == "hash" else "t", a.engine_rnum), also="cpu_ratio")
    rs = [r for r in raw if r["cell"] == "20k-get-cpu"]
    if rs:
        add(rs, "tree 20 KB get CPU",
            "20 KB gets from the tree: server CPU per request, kura / memcached",
            "%.1f us (%s ops/s)" % (med(rs, "kura_us"), R.fmt_rate(med(rs, "kura_ops_s"))),
            "%.1f us (%s ops/s)" % (med(rs, "memcached_us"),
                                    R.fmt_rate(med(rs, "memcached_ops_s"))),
            1.1, "<=", "kurad -th 1 DIR/bench.kb | memcached -t 1 (CPU %s); kura-bench -c 16 "
            "-v %d --ratio 0:1 --pattern uniform --keys %d --ops %d (CPU %s)" % (
                a.server_cpus or "any", VALUE, a.keys, a.get_ops, a.client_cpus or "any"))
    for name, label, what in (
            ("tree", "tree -th 2 / -th 1", "20 KB tree gets, kurad -th 2 / -th 1"),
            ("memcached", "memcached -t 2 / -t 1",
             "memcached -t 2 / -t 1, the same load (for reference)")):
        rs = [r for r in raw if r["cell"] == "20k-get-th2-" + name]
        if not rs:
            continue
        cmd = "%s; kura-bench -t 2 -c 8 -v %d --ratio 0:1 --keys %d --ops %d, nothing pinned" % (
            "kurad -th N DIR/bench.kb" if name == "tree" else "memcached -t N", VALUE,
            a.keys, a.get_ops)
        cu = [r["client_us"] for r in rs if r.get("client_us", "") != ""]
        add(rs, label, what + (" (the client costing %.1f us of CPU a get, the server %.1f, "
                               "on the same two cores)" % (
                                   R.median(cu), med(rs, "th1_server_us")) if cu else ""),
            "%s ops/s" % R.fmt_rate(med(rs, "th2_ops_s")),
            "%s ops/s" % R.fmt_rate(med(rs, "th1_ops_s")),
            1.7 if name == "tree" else None, ">=", cmd)
        pr = [dict(r, ratio=r["projected"]) for r in rs if r.get("projected", "") != ""]
        add(pr, label + " (projected)",
            what + ", projected for two server cores of its own from the server's CPU a get: "
            "2 x CPU(-th 1) / CPU(-th 2) (assumes no time lost off the CPU)",
            "%.1f us a get at -th 2" % med(pr, "th2_server_us"),
            "%.1f us at -th 1" % med(pr, "th1_server_us"),
            None, ">=", "the runs of the row above (for reference: a model, not the target's "
            "measure)")
    mc_by_rep = {r["rep"]: r for r in raw if r["cell"] == "20k-set-memcached"}
    for name in ("hash", "tree", "memcached"):
        rs = [r for r in raw if r["cell"] == "20k-set-" + name]
        if not rs:
            continue
        wpb = [r["written_per_value_byte"] for r in rs if r["written_per_value_byte"] != ""]
        wb = [r["worker_busy"] for r in rs if r.get("worker_busy", "") != ""]
        wq = [r["worker_runq"] for r in rs if r.get("worker_runq", "") != ""]
        srv = ("kurad -th 1 -sync interval DIR/bench.%s" % ("kh" if name == "hash" else "kb")
               if name != "memcached" else "memcached -t 1")
        tl = [r["through_limit"] for r in rs if r.get("through_limit", "") != ""]
        disk = (" (a disk held to %g MB/s by the block cgroup: bench/disklimit.py)" %
                a.disk_limit if a.disk_limit else "")
        add(rs, "%s 20 KB sets / dd%s" % (name, " (limited disk)" if a.disk_limit else ""),
            ("20 KB sets, %s, -sync interval: value bytes to disk / dd's bandwidth" % name
             if name != "memcached" else
             "memcached, the same sets (in memory) / dd's bandwidth (for reference)") + disk,
            "%.0f MB/s to disk (%.0f MB/s acknowledged, %s bytes written a value byte%s, "
            "the server's CPU busy %.0f%% of the sets' time, %.1f us a set; its worker on a "
            "CPU %s of the time and waiting for one %s)" % (
                med(rs, "durable_bytes_s") / 1e6, med(rs, "acked_bytes_s") / 1e6,
                "%.2f" % R.median(wpb) if wpb else "?",
                ", %.2f of them through the limit" % R.median(tl) if tl else "",
                100 * med(rs, "server_busy"),
                med(rs, "cpu_us_per_set"), "%.0f%%" % (100 * R.median(wb)) if wb else "?",
                "%.0f%%" % (100 * R.median(wq)) if wq else "?"),
            "dd: %.0f MB/s (conv=fdatasync: %.0f MB/s)" % (
                med(rs, "disk_bytes_s") / 1e6, med(rs, "dd_fdatasync_bytes_s") / 1e6),
            0.8 if name != "memcached" else None, ">=",
            "%s (CPU %s); kura-bench -c 16 -v %d --ratio 1:0 --pattern seq --keys %d --ops %d "
            "(CPU %s)%s; dd if=/dev/zero of=DIR/dd.bin bs=1M count=%d oflag=direct before and "
            "after" % (srv, a.server_cpus or "any", VALUE, a.set_keys, a.set_keys,
                       a.client_cpus or "any", ", then SIGTERM" if name != "memcached" else "",
                       a.dd_mib))
        # What this machine allows a server of 20 KB sets: the disk, or what the
        # client, the loopback and one server CPU deliver (memcached, which
        # writes nothing, in the same repetition), whichever is lower.
        paired = [r for r in rs if r["rep"] in mc_by_rep and name != "memcached"]
        if paired:
            ceil = [dict(r, ratio=r["durable_bytes_s"] / min(
                r["disk_bytes_s"], mc_by_rep[r["rep"]]["acked_bytes_s"])) for r in paired]
            add(ceil, "%s 20 KB sets / ceiling%s" % (name, " (limited disk)" if a.disk_limit else ""),
                "20 KB sets, %s, -sync interval: value bytes to disk / the lower of dd's "
                "bandwidth and memcached's rate in the same repetition" % name,
                "%.0f MB/s to disk" % (med(paired, "durable_bytes_s") / 1e6),
                "%.0f MB/s (dd %.0f, memcached %.0f)" % (
                    R.median([min(r["disk_bytes_s"], mc_by_rep[r["rep"]]["acked_bytes_s"])
                              for r in paired]) / 1e6, med(paired, "disk_bytes_s") / 1e6,
                    R.median([mc_by_rep[r["rep"]]["acked_bytes_s"] for r in paired]) / 1e6),
                0.8, ">=", "the runs of the two rows above")
            cpu = [dict(r, ratio=r["cpu_us_per_set"] / mc_by_rep[r["rep"]]["cpu_us_per_set"])
                   for r in paired if mc_by_rep[r["rep"]]["cpu_us_per_set"] > 0]
            add(cpu, "%s 20 KB set CPU" % name,
                "20 KB sets, %s: server CPU a set, kura / memcached (for reference: steadier "
                "than the rates while other work shares the CPUs)" % name,
                "%.1f us" % med(cpu, "cpu_us_per_set"),
                "%.1f us" % R.median([mc_by_rep[r["rep"]]["cpu_us_per_set"] for r in cpu]),
                None, "<=", "the runs of the two rows above")
    return rows


def markdown(rows, a, info, load0, load1, elapsed, failures):
    md = ["_Generated by `bench/footprint.py` on %s in %.0f s; %d repetition(s), medians; "
          "load average (1 min) %s before, %s after._\n" % (
              datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), elapsed, a.reps, load0, load1),
          "**Machine:** %s, %d cores%s, %d MiB RAM, Linux %s, %s.\n" % (
              info["cpu"], info["cores"], " (%s guest)" % info["virt"] if info["virt"] else "",
              info["mem_mb"], info["kernel"], info["memcached"]),
          "| figure | kura | yardstick | ratio (± half spread) | target | | command |",
          "|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append("| %s | %s | %s | **%.2f** ±%.0f%% | %s | %s | `%s` |" % (
            r["figure"], r["kura"], r["yardstick"], r["ratio"], r["spread_pct"] / 2,
            r["target"], r["met"], r["command"]))
    md.append("\n![issue 23's ratios](../bench/results/footprint.png)\n")
    if failures:
        md.append("**Failures:**\n\n" + "\n".join("- " + f.replace("\n", " ") for f in failures) + "\n")
    return "\n".join(md)


PARTS = {"engine": part_engine, "cpu": part_cpu, "scale": part_scale, "disk": part_disk}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--parts", default="engine,cpu,scale,disk", help="comma list (default: all)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true",
                    help="1 repetition, 100k engine records, a tenth of the requests")
    ap.add_argument("--engine-rnum", type=int, default=R.ENGINE_RNUM)
    ap.add_argument("--keys", type=int, default=20000, help="20 KB values read (default 20000)")
    ap.add_argument("--get-ops", type=int, default=100000, help="gets per run (default 100000)")
    ap.add_argument("--set-keys", type=int, default=25000,
                    help="20 KB sets per disk run (default 25000: 500 MB)")
    ap.add_argument("--dd-mib", type=int, default=512, help="dd's MiB (default 512)")
    ap.add_argument("--disk-limit", type=float, default=0, metavar="MBPS",
                    help="disk part: hold dd and the servers to MBPS MB/s of writes with the "
                    "block cgroup (bench/disklimit.py; root), a disk of known bandwidth")
    R.output_args(ap, "kura-bench")
    a = ap.parse_args(argv)
    R.pin_defaults(a)
    if a.quick:
        a.reps = 1
        a.engine_rnum = min(a.engine_rnum, 100000)
        a.keys, a.get_ops = max(100, a.keys // 10), max(1000, a.get_ops // 10)
        a.set_keys, a.dd_mib = max(100, a.set_keys // 10), max(8, a.dd_mib // 10)
    a.build = os.path.abspath(a.build)
    a.bench = os.path.join(a.build, "kura-bench")
    a.kurad = os.environ.get("KURAD") or os.path.join(a.build, "kurad")
    parts = [p for p in a.parts.split(",") if p]
    for p in parts:
        if p not in PARTS:
            sys.exit("footprint.py: unknown part '%s' (%s)" % (p, ", ".join(PARTS)))
    for f in (a.bench, a.kurad):
        if not os.access(f, os.X_OK):
            sys.exit("footprint.py: %s not built" % f)
    os.makedirs(a.out, exist_ok=True)
    tmp_root = os.path.join(ROOT, "bench", "results", "tmp")
    os.makedirs(tmp_root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="footprint-", dir=tmp_root)
    if os.geteuid() == 0:
        os.chmod(tmp, 0o777)
    info, load0, t0 = R.machine_info(), R.loadavg(), time.monotonic()
    raw, failures = [], []
    log("issue 23's figures: parts %s, %d rep(s), load average %s" % (",".join(parts), a.reps, load0))
    try:
        for rep in range(1, a.reps + 1):
            log("-- rep %d/%d (%.0f s elapsed)" % (rep, a.reps, time.monotonic() - t0))
            for p in parts:
                try:
                    PARTS[p](a, tmp, rep, raw)
                except (RuntimeError, OSError, ValueError, KeyError) as e:
                    failures.append("%s rep %d: %s" % (p, rep, e))
                    log("  FAILED %s rep %d: %s" % (p, rep, e))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.monotonic() - t0
    rows = figures(raw, a)
    md = markdown(rows, a, info, load0, R.loadavg(), elapsed, failures)
    log("")
    log(md)
    R.save_results(a.out, "footprint", rows, raw, md)
    dat = [(r["label"], [r["ratio"], r["target_value"]]) for r in rows]
    R.gnuplot_bars(dat, ["measured", "target"], os.path.join(a.out, "footprint.png"),
                   "issue 23: kura / its yardstick, median of %d run(s)" % a.reps,
                   "ratio", logscale=False, yformat="%.1f")
    if not a.no_docs and os.path.abspath(a.out) == os.path.abspath(R.RESULTS):
        if set(parts) != set(PARTS):
            # the block holds every part's rows: a partial run would drop the others'
            log("\ndocs/benchmarks.md left alone: only a run of every part rewrites it")
        elif R.splice_docs(md, BEGIN, END):
            log("\ndocs/benchmarks.md updated")
    return 1 if failures or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
