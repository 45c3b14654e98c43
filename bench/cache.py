#!/usr/bin/python3
"""Issue 35's figures: kura's in-memory cache beside memcached, in one run.

    bench/cache.py [--kurad [LABEL=]PATH ...] [--parts memory,hits,cpu,restart]
                   [--quick] [--reps N] [--cpu-reps N] [--no-docs]
    make bench-cache CACHE_BENCH_ARGS="..."

Debian's memcached is the yardstick of every figure; each kurad named by
--kurad (repeatable; default build/kurad, or $KURAD) is measured beside it
in the same run, so that builds (main's cache and a rewrite of it) can be
set side by side: `--kurad main=/src/main/build/kurad --kurad
seg=/src/seg/build/kurad`.  Kura-bench and kura-hitbench come from --build.

memory   RSS growth per item (bench/memory.py's fill: one connection of
         pipelined noreply sets, 12-byte keys) for 1,000,000 items of 64 B,
         112 B (100-byte values), 1 KB and mixed sizes (64 B to 1 KB, a
         function of the key), key + value; both servers with the same -m,
         1024 or what the cell needs to evict nothing (the row says which),
         each with its default thread count; the items counted by stats are
         shown, so an eviction would be seen.  Ratio kura / memcached.
hits     hit ratio of each server started with -m 64 (-t 1 / -th 1 pinned to
         the server CPU) under kura-hitbench (pinned to the client CPU):
         keys drawn from 2,000,000, a get, then a 300-byte set on a miss,
         in multi-gets of 100 keys; Zipf 0.9, 0.99 and 1.1, and a scan-heavy
         mix (Zipf 0.99, each 100,000 requests followed by a scan of 50,000
         consecutive keys); 1,000,000 requests of warm-up, 2,000,000
         counted.  The difference in points is kura's minus memcached's.
cpu      small-value throughput and the server's CPU a request (the run
         time of its threads over the cell, /proc/PID/task/*/schedstat),
         bench/cells_cpu.sh's cells with kura-bench, 50,000 requests each:
         each server -m 1024, one worker pinned to the server CPU, started
         fresh each repetition, all cells in turn, servers alternated.  Ratios against memcached, and against the
         first kurad (today's cache) for the ones after it.
restart  warm restart, for a kurad that takes -e FILE (its -h lists it):
         -m 1024 -e FILE (on /dev/shm when there is one), 1,000,000 items of
         100-byte values, SIGTERM, the same command again: the time from the
         start until the first get answers, and the items back (stats
         curr_items, and that get a hit).  Else the row says not applicable.
         memcached -e FILE stopped with SIGUSR1 beside it, for reference.

Writes bench/results/cache.{md,csv,png}, cache-runs.csv, and (a run of
every part, against the default results directory) the generated part of
docs/benchmarks.md's "The cache beside memcached" section.  Exit 1 if a
run failed.
"""
import argparse, datetime, json, os, re, shutil, signal, socket, subprocess, sys, tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R          # noqa: E402  (bench/run.py: pinning, plots, docs)
import memory as M       # noqa: E402  (bench/memory.py: the fill, RSS)
import footprint as F    # noqa: E402  (bench/footprint.py: kura-bench runs, process CPU)

ROOT = R.ROOT
BEGIN = "<!-- BEGIN CACHE RESULTS (bench/cache.py rewrites this part) -->"
END = "<!-- END CACHE RESULTS -->"
log = R.log

# (id, title, value size or a function of the key's index, -m)
MIXED = lambda i: 52 + (i * 2654435761 % 4294967296) % 961     # noqa: E731  64 B .. 1 KB items
SIZES = [("64B", "64 B items (52-byte values)", 52, 1024),
         ("112B", "112 B items (100-byte values)", 100, 1024),
         ("1KB", "1 KB items (1012-byte values)", 1012, 2048),
         ("mixed", "mixed, 64 B to 1 KB items", MIXED, 1536)]
# (id, title, kura-hitbench arguments)
MIXES = [("zipf-0.9", "Zipf 0.9", ["--zipf", "0.9"]),
         ("zipf-0.99", "Zipf 0.99", ["--zipf", "0.99"]),
         ("zipf-1.1", "Zipf 1.1", ["--zipf", "1.1"]),
         ("scan", "Zipf 0.99 + scans (100k Zipf, then 50k sequential)",
          ["--zipf", "0.99", "--scan", "100000:50000"])]
# bench/cells_cpu.sh's cells: (id, conns, kura-bench arguments; N = --cpu-ops)
CELLS = [("sets1", 1, "--ratio 1:0 --pattern seq --ops N --keys N --key-prefix a:"),
         ("gets1", 1, "--ratio 0:1 --pattern seq --ops N --keys N --key-prefix a: --verify"),
         ("miss1", 1, "--ratio 0:1 --miss-ratio 1 --ops N --key-prefix a:"),
         ("gets20", 20, "--ratio 0:1 --ops N --keys N --key-prefix a: --verify"),
         ("mix16", 16, "--ratio 3:7 --keys 10000 --prefill --pattern uniform --ops N "
                       "--key-prefix c: --verify"),
         ("v100sets16", 16, "-v 100 --ratio 1:0 --pattern seq --keys N --ops N --key-prefix d:"),
         ("v100gets16", 16, "-v 100 --ratio 0:1 --pattern uniform --keys N --ops N "
                            "--key-prefix d: --verify")]

# ------------------------------------------------------------------ servers


class Srv:
    """A server to measure: memcached, or one kurad build."""

    def __init__(self, label, kind, binary):
        self.label, self.kind, self.binary = label, kind, binary

    def cmd(self, port, limit_mb, threads=None, extra=()):
        t = [] if threads is None else (["-t", str(threads)] if self.kind == "memcached"
                                        else ["-th", str(threads)])
        c = M.server_cmd(self.kind, self.binary, port, limit_mb, list(t) + list(extra))
        if self.kind != "memcached":
            c[1:1] = ["-host", "127.0.0.1"]
        return c

    def takes_e(self):
        """Whether this server takes -e FILE (a warm restart): its help lists it."""
        if self.kind == "memcached":
            return True
        p = subprocess.run([self.binary, "-h"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        return re.search(r"^\s+-e\s", p.stdout, re.M) is not None


class Running:
    """One started server process (its own session, its output to a log)."""

    def __init__(self, srv, tmp, limit_mb, threads=None, cpus="", extra=(), deadline_s=120):
        self.srv = srv
        self.logpath = os.path.join(tmp, "server-%s.log" % re.sub(r"\W", "_", srv.label))
        for _attempt in range(3):
            self.port = R.free_port()
            self.cmd = srv.cmd(self.port, limit_mb, threads, extra)
            with open(self.logpath, "ab") as logf:
                self.t0 = time.monotonic()
                self.proc = subprocess.Popen(R.taskset(cpus) + self.cmd, stdout=logf,
                                             stderr=subprocess.STDOUT, cwd=tmp,
                                             start_new_session=True)
            if R.wait_listening(self.port, self.proc, deadline_s):
                return
            R.stop(self.proc)
        raise RuntimeError("%s did not start: `%s`: %s" % (srv.label, shown(self.cmd, tmp),
                                                            self.tail()))

    def tail(self):
        try:
            with open(self.logpath, "rb") as f:
                return f.read()[-300:].decode("utf-8", "replace").strip().replace("\n", " | ")
        except OSError:
            return ""

    def stop(self):
        R.stop(self.proc, 120)


def shown(cmd, tmp):
    """A command line as the results show it: no path of this machine, the
    port as PORT."""
    cmd = [("PORT" if i and cmd[i - 1] in ("-p", "-port") else a) for i, a in enumerate(cmd)]
    return " ".join("DIR/" + os.path.relpath(a, tmp) if a.startswith(tmp + "/") else
                    "SHM/" + os.path.basename(a) if a.startswith("/dev/shm/") else
                    os.path.basename(a) if os.path.isabs(a) and os.access(a, os.X_OK) else a
                    for a in cmd)


def ask(port, request, timeout=30):
    """One request on a new connection; the reply up to its END line, or
    None if the connection closed before it (raises OSError)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                return None
            buf += chunk
    return buf


def stats(port):
    out = {}
    for line in (ask(port, b"stats\r\n") or b"").decode("utf-8", "replace").split("\r\n"):
        p = line.split()
        if len(p) == 3 and p[0] == "STAT":
            out[p[1]] = p[2]
    return out

# ------------------------------------------------------------------- parts


def part_memory(a, servers, tmp, rep, raw):
    for sid, title, vsize, limit in SIZES:
        order = servers if rep % 2 else servers[::-1]
        for s in order:
            port = R.free_port()
            cmd = s.cmd(port, limit)
            try:
                got = M.measure(s.label, cmd, port, a.items, vsize, full=True)
            except SystemExit as e:             # memory.py's way of failing
                raise RuntimeError("%s %s: %s" % (s.label, sid, e))
            raw.append(dict(rep=rep, part="memory", cell=sid, server=s.label,
                            limit_mb=limit, items=got["items"], per_item=got["per_item"],
                            rss_before_kib=got["rss_before_kib"],
                            rss_after_kib=got["rss_after_kib"], command=shown(cmd, tmp)))


def part_hits(a, servers, tmp, rep, raw):
    hb = os.path.join(a.build, "kura-hitbench")
    for mid, title, args in MIXES:
        for s in (servers if rep % 2 else servers[::-1]):
            r = Running(s, tmp, a.hit_mb, threads=1, cpus=a.server_cpus)
            try:
                cmd = R.taskset(a.client_cpus) + [
                    hb, "-p", str(r.port), "--keys", str(a.hit_keys), "--warmup",
                    str(a.warmup), "--requests", str(a.requests), "--value-size", "300",
                    "--batch", "100"] + args
                p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if p.returncode != 0 or r.proc.poll() is not None:
                    raise RuntimeError("kura-hitbench %s on %s: exit %d: %s %s" % (
                        mid, s.label, p.returncode, p.stderr.strip()[-300:], r.tail()))
                res = json.loads(p.stdout.strip().splitlines()[-1])
                st = stats(r.port)
            finally:
                r.stop()
            raw.append(dict(rep=rep, part="hits", cell=mid, server=s.label,
                            hit_ratio=res["hit_ratio"], zipf_hit_ratio=res["zipf_hit_ratio"],
                            scan_hit_ratio=res["scan_hit_ratio"], requests=res["requests"],
                            seconds=res["seconds"], curr_items=int(st.get("curr_items", 0)),
                            evictions=int(st.get("evictions", 0)),
                            command=shown(r.cmd, tmp)))
            if a.verbose:
                log("    hits %-9s %-14s %.4f (zipf part %.4f), %s items held, %.1f s" % (
                    mid, s.label, res["hit_ratio"], res["zipf_hit_ratio"],
                    st.get("curr_items"), res["seconds"]))


def threads_cpu_s(pid):
    """The CPU time of a process's threads (schedstat, in ns: a cell of a few
    thousand requests is a few ticks of /proc/PID/stat)."""
    return sum(run for run, _wait in F.proc_threads(pid).values())


def part_cpu(a, servers, tmp, rep, raw):
    for s in (servers if rep % 2 else servers[::-1]):
        r = Running(s, tmp, 1024, threads=1, cpus=a.server_cpus)
        try:
            for cid, conns, args in CELLS:
                argv = args.replace("N", str(a.cpu_ops)).split()
                F.settle(r.proc.pid)
                c0 = threads_cpu_s(r.proc.pid)
                res = F.bench_run(a, r.port, argv, a.client_cpus, threads=1, conns=conns)
                c1 = threads_cpu_s(r.proc.pid)
                raw.append(dict(rep=rep, part="cpu", cell=cid, server=s.label,
                                ops_s=res["ops_per_sec"], ops=res["ops"],
                                cpu_us=1e6 * (c1 - c0) / res["ops"] if res["ops"] else 0.0,
                                command=shown(r.cmd, tmp)))
                if a.verbose:
                    log("    cpu %-11s %-14s %9.0f ops/s  %5.1f us CPU a request" % (
                        cid, s.label, res["ops_per_sec"], raw[-1]["cpu_us"]))
        finally:
            r.stop()


def first_get(port, key, deadline_s):
    """Polls until a get of key answers; whether it was a hit."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            buf = ask(port, b"get " + key + b"\r\n", timeout=5)
            if buf is not None:
                return buf.startswith(b"VALUE ")
        except OSError:
            pass
        time.sleep(0.002)
    raise RuntimeError("no get answered within %d s" % deadline_s)


def part_restart(a, servers, tmp, rep, raw):
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tmp
    for s in servers:
        if not s.takes_e():
            raw.append(dict(rep=rep, part="restart", cell="restart", server=s.label,
                            applicable=0, note="not applicable: this kurad takes no -e FILE"))
            continue
        d = tempfile.mkdtemp(prefix="kura-cachebench-", dir=shm)
        try:
            f = os.path.join(d, "cache")
            extra = ["-e", f]
            r = Running(s, tmp, 1024, extra=extra)
            try:
                sock = socket.create_connection(("127.0.0.1", r.port), timeout=60)
                M.fill(sock, a.items, 100)
                sock.close()
                before = int(stats(r.port).get("curr_items", 0))
                t0 = time.monotonic()
                r.proc.send_signal(signal.SIGUSR1 if s.kind == "memcached" else signal.SIGTERM)
                r.proc.wait(300)
                stop_s, rc = time.monotonic() - t0, r.proc.returncode
            finally:
                r.stop()
            r = Running(s, tmp, 1024, extra=extra)
            try:
                hit = first_get(r.port, b"key:00000000", 300)
                up_s = time.monotonic() - r.t0
                after = int(stats(r.port).get("curr_items", 0))
                lines = [x for x in r.tail().split(" | ") if "restart" in x.lower()]
            finally:
                r.stop()
            raw.append(dict(rep=rep, part="restart", cell="restart", server=s.label,
                            applicable=1, items_before=before, items_after=after,
                            first_get_hit=int(hit), stop_s=stop_s, stop_rc=rc, start_s=up_s,
                            note=lines[-1][:160] if lines and after < before else "",
                            command=shown(r.cmd, tmp) + (" (stopped with SIGUSR1)"
                                                         if s.kind == "memcached" else
                                                         " (stopped with SIGTERM)")))
            if a.verbose:
                log("    restart %-14s %d items -> %d, first get %.3f s after the start (%s), "
                    "stop %.2f s" % (s.label, before, after, up_s, "hit" if hit else "miss",
                                     stop_s))
        finally:
            shutil.rmtree(d, ignore_errors=True)

# ------------------------------------------------------------------ summary


def med(rows, k):
    return R.median([r[k] for r in rows])


def summarize(raw, servers):
    """One row per figure and server: medians over the repetitions, and the
    ratio to memcached in the same repetitions."""
    base = servers[0].label
    kuras = [s.label for s in servers[1:]]
    rows = []

    def per(part, cell, label):
        return [r for r in raw if r["part"] == part and r["cell"] == cell and r["server"] == label]

    for sid, title, _v, limit in SIZES:
        for lab in [base] + kuras:
            rs = per("memory", sid, lab)
            if rs:
                mc = per("memory", sid, base)
                rows.append(dict(part="memory", cell=sid, title=title, server=lab, limit_mb=limit,
                                 value=round(med(rs, "per_item"), 1),
                                 items=min(r["items"] or 0 for r in rs),
                                 ratio=round(med(rs, "per_item") / med(mc, "per_item"), 3)
                                 if mc and lab != base else ""))
    for mid, title, _args in MIXES:
        for lab in [base] + kuras:
            rs = per("hits", mid, lab)
            if rs:
                mc = per("hits", mid, base)
                v = med(rs, "hit_ratio")
                rows.append(dict(part="hits", cell=mid, title=title, server=lab,
                                 value=round(v, 4), zipf_part=round(med(rs, "zipf_hit_ratio"), 4),
                                 items=int(med(rs, "curr_items")),
                                 points=round(100 * (v - med(mc, "hit_ratio")), 2)
                                 if mc and lab != base else "",
                                 zipf_points=round(100 * (med(rs, "zipf_hit_ratio") -
                                                          med(mc, "zipf_hit_ratio")), 2)
                                 if mc and lab != base else "",
                                 ratio=round(v / med(mc, "hit_ratio"), 4)
                                 if mc and lab != base else ""))
    for cid, _conns, _args in CELLS:
        for lab in [base] + kuras:
            rs = per("cpu", cid, lab)
            if not rs:
                continue

            def paired(other, key):
                out = []
                for r in rs:
                    o = [x for x in raw if x["part"] == "cpu" and x["cell"] == cid and
                         x["server"] == other and x["rep"] == r["rep"]]
                    if o and o[0][key]:
                        out.append(r[key] / o[0][key])
                return round(R.median(out), 3) if out else ""
            rows.append(dict(part="cpu", cell=cid, title=cid, server=lab,
                             value=round(med(rs, "ops_s")), cpu_us=round(med(rs, "cpu_us"), 2),
                             spread_pct=round(R.spread_pct([r["ops_s"] for r in rs]), 1),
                             ratio=paired(base, "ops_s") if lab != base else "",
                             cpu_ratio=paired(base, "cpu_us") if lab != base else "",
                             vs_first=paired(kuras[0], "ops_s")
                             if kuras and lab not in (base, kuras[0]) else "",
                             cpu_vs_first=paired(kuras[0], "cpu_us")
                             if kuras and lab not in (base, kuras[0]) else ""))
    for lab in [base] + kuras:
        rs = per("restart", "restart", lab)
        if rs:
            ok = [r for r in rs if r["applicable"]]
            rows.append(dict(part="restart", cell="restart", title="warm restart", server=lab,
                             value=round(med(ok, "start_s"), 3) if ok else "",
                             items_before=int(med(ok, "items_before")) if ok else "",
                             items_after=int(med(ok, "items_after")) if ok else "",
                             first_get_hit=min(r["first_get_hit"] for r in ok) if ok else "",
                             stop_s=round(med(ok, "stop_s"), 3) if ok else "",
                             note=rs[-1].get("note", "")))
    return rows


def markdown(rows, raw, a, servers, info, load0, load1, elapsed, failures):
    base = servers[0].label
    kuras = [s.label for s in servers[1:]]
    md = ["_Generated by `bench/cache.py%s` on %s in %.0f s; load average (1 min) %s before, "
          "%s after._\n" % (a.shown_args, datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                            elapsed, load0, load1),
          "**Machine:** %s, %d cores%s, %d MiB RAM, Linux %s, %s.\n" % (
              info["cpu"], info["cores"], " (%s guest)" % info["virt"] if info["virt"] else "",
              info["mem_mb"], info["kernel"], info["memcached"])]
    by = {}
    for r in rows:
        by[(r["part"], r["cell"], r["server"])] = r

    def cmdline(part, lab):
        c = [x["command"] for x in raw if x["part"] == part and x["server"] == lab
             and x.get("command")]
        return c[0] if c else ""

    if any(r["part"] == "memory" for r in rows):
        md.append("**Memory per item**: RSS growth over %s items, 12-byte keys "
                  "(bench/memory.py's fill); in brackets: / memcached.\n" % R.fmt_ops(a.items))
        md.append("| items | -m | " + " | ".join(
            "%s bytes an item" % lab for lab in [base] + kuras) + " |")
        md.append("|---|---|" + "---|" * (1 + len(kuras)))
        for sid, title, _v, limit in SIZES:
            cells = []
            for lab in [base] + kuras:
                r = by.get(("memory", sid, lab))
                cells.append("-" if not r else "%.1f%s%s" % (
                    r["value"], " (**%.2f**)" % r["ratio"] if r["ratio"] != "" else "",
                    "" if r["items"] == a.items else ", %s items held" % r["items"]))
            md.append("| %s | %d | %s |" % (title, limit, " | ".join(cells)))
        md.append("")
    if any(r["part"] == "hits" for r in rows):
        md.append("**Hit ratio at -m %d**: %s keys, a get then a 300-byte set on a miss, "
                  "%s requests after %s of warm-up (kura-hitbench, multi-gets of 100); points: "
                  "kura's minus memcached's; for the scan mix, its Zipf requests alone beside.\n"
                  % (a.hit_mb, R.fmt_ops(a.hit_keys), R.fmt_ops(a.requests), R.fmt_ops(a.warmup)))
        md.append("| mix | " + " | ".join("%s hit ratio (items held)" % lab
                                          for lab in [base] + kuras) + " |")
        md.append("|---|" + "---|" * (1 + len(kuras)))
        for mid, title, _args in MIXES:
            cells = []
            for lab in [base] + kuras:
                r = by.get(("hits", mid, lab))
                if not r:
                    cells.append("-")
                    continue
                t = "%.4f" % r["value"]
                if r["points"] != "":
                    t += " (**%+.2f** points)" % r["points"]
                if mid == "scan":
                    t += "; Zipf part %.4f%s" % (r["zipf_part"], " (%+.2f)" % r["zipf_points"]
                                                 if r["zipf_points"] != "" else "")
                cells.append(t + " (%s)" % R.fmt_ops(r["items"]) if r["items"] >= 1000
                             else t + " (%d)" % r["items"])
            md.append("| %s | %s |" % (title, " | ".join(cells)))
        md.append("")
    if any(r["part"] == "cpu" for r in rows):
        md.append("**Small values: throughput and the server's CPU a request** "
                  "(bench/cells_cpu.sh's cells, %s requests each, one worker on CPU %s, "
                  "kura-bench on CPU %s; median of %d repetition(s); ratios paired by "
                  "repetition%s).\n" % (
                      R.fmt_ops(a.cpu_ops), a.server_cpus or "any", a.client_cpus or "any",
                      a.cpu_reps, "; \"/ %s\": against the first kurad, today's cache" % kuras[0]
                      if len(kuras) > 1 else ""))
        head = "| cell | " + " | ".join("%s ops/s, CPU µs" % lab for lab in [base] + kuras) + \
            " | " + " | ".join("%s / %s ops/s, CPU" % (lab, base) for lab in kuras)
        extra = kuras[1:]
        if extra:
            head += " | " + " | ".join("%s / %s ops/s, CPU" % (lab, kuras[0]) for lab in extra)
        md.append(head + " |")
        md.append("|---|" + "---|" * (1 + 2 * len(kuras) + len(extra)))
        for cid, _c, _args in CELLS:
            cells = []
            for lab in [base] + kuras:
                r = by.get(("cpu", cid, lab))
                cells.append("-" if not r else "%s ±%.0f%%, %.1f" % (
                    R.fmt_rate(r["value"]), r["spread_pct"] / 2, r["cpu_us"]))
            for lab in kuras:
                r = by.get(("cpu", cid, lab))
                cells.append("-" if not r or r["ratio"] == "" else "**%.2f**, %.2f" % (
                    r["ratio"], r["cpu_ratio"]))
            for lab in extra:
                r = by.get(("cpu", cid, lab))
                cells.append("-" if not r or r["vs_first"] == "" else "**%.2f**, %.2f" % (
                    r["vs_first"], r["cpu_vs_first"]))
            md.append("| %s | %s |" % (cid, " | ".join(cells)))
        md.append("")
    if any(r["part"] == "restart" for r in rows):
        md.append("**Warm restart**: %s items of 100-byte values, -m 1024 -e FILE, a graceful "
                  "stop, the same command again; the time from the start until the first get "
                  "answers.\n" % R.fmt_ops(a.items))
        md.append("| server | first get answered | items before → after | first get | stop |")
        md.append("|---|---|---|---|---|")
        for lab in [base] + kuras:
            r = by.get(("restart", "restart", lab))
            if not r:
                continue
            if r["value"] == "":
                md.append("| %s | %s | | | |" % (lab, r["note"]))
            else:
                md.append("| %s | %.3f s | %s → %s%s | %s | %.2f s |" % (
                    lab, r["value"], r["items_before"], r["items_after"],
                    " (%s)" % r["note"] if r["note"] else "",
                    "hit" if r["first_get_hit"] else "miss", r["stop_s"]))
        md.append("")
    md += targets_markdown(rows, servers)
    md.append("Commands (DIR: a temp dir; SHM: one on /dev/shm):\n")
    for part in ("memory", "hits", "cpu", "restart"):
        for lab in [base] + kuras:
            c = cmdline(part, lab)
            if c:
                md.append("- %s, %s: `%s`" % (part, lab, c))
    md.append("\n![kura / memcached](../bench/results/cache.png)\n")
    if failures:
        md.append("**Failures:**\n\n" + "\n".join("- " + f.replace("\n", " ") for f in failures)
                  + "\n")
    return "\n".join(md)


def targets_markdown(rows, servers):
    """Issue 35's targets, each kurad's figure and whether it meets it."""
    kuras = [s.label for s in servers[1:]]

    def get(part, cell, lab):
        r = [x for x in rows if x["part"] == part and x["cell"] == cell and x["server"] == lab]
        return r[0] if r else None

    def cell(ok, figure, na="-"):
        return na if ok is None else "%s: %s" % (figure, "met" if ok else "**not met**")
    md = ["**Issue 35's targets** (this run):\n",
          "| target | " + " | ".join(kuras) + " |", "|---|" + "---|" * len(kuras)]
    lines = {k: [] for k in ("mem", "z99", "others", "restart", "cells")}
    for lab in kuras:
        r = get("memory", "112B", lab)
        ok = r["ratio"] <= 0.70 if r and r["ratio"] != "" else None
        lines["mem"].append(cell(ok, ok is not None and "%.2f" % r["ratio"]))
        r = get("hits", "zipf-0.99", lab)
        ok = r["points"] >= 0 if r and r["points"] != "" else None
        lines["z99"].append(cell(ok, ok is not None and "%+.2f points" % r["points"]))
        pts = [get("hits", m[0], lab) for m in MIXES if m[0] != "zipf-0.99"]
        pts = [r["points"] for r in pts if r and r["points"] != ""]
        ok = min(pts) >= -0.5 if pts else None
        lines["others"].append(cell(ok, pts and "lowest %+.2f points" % min(pts)))
        r = get("restart", "restart", lab)
        ok = (r["value"] < 1.0 and r["items_after"] == r["items_before"]) \
            if r and r["value"] != "" else None
        lines["restart"].append(cell(ok, ok is not None and "%.3f s" % r["value"],
                                     "not applicable (no -e)"))
        vs = [get("cpu", c[0], lab) for c in CELLS]
        vs = [r["vs_first"] for r in vs if r and r["vs_first"] != ""]
        ok = min(vs) >= 0.95 if vs else None
        lines["cells"].append(cell(ok, vs and "lowest %.2f" % min(vs),
                                   "the reference" if lab == kuras[0] else "-"))
    for key, what in (("mem", "RSS growth per 112 B item ≤ 0.70 × memcached's"),
                      ("z99", "hit ratio under the limit, Zipf 0.99 ≥ memcached's"),
                      ("others", "hit ratio, every other mix ≥ memcached's − 0.5 points"),
                      ("restart", "warm restart in < 1 s, every item back"),
                      ("cells", "no small-value cell's ops/s below 0.95 × the first kurad's "
                                "(today's cache)")):
        md.append("| %s | %s |" % (what, " | ".join(lines[key])))
    md.append("")
    return md


def plot(rows, servers, out):
    """Bars: each figure of each kurad over memcached's (memory per item, hit
    ratio, small-value ops/s), with issue 35's targets beside."""
    kuras = [s.label for s in servers[1:]]
    dat = []
    targets = {("memory", "112B"): 0.7, ("hits", "zipf-0.99"): 1.0}
    for part, ids in (("memory", [x[0] for x in SIZES]), ("hits", [x[0] for x in MIXES]),
                      ("cpu", [x[0] for x in CELLS])):
        for cid in ids:
            vals = []
            for lab in kuras:
                r = [x for x in rows if x["part"] == part and x["cell"] == cid and
                     x["server"] == lab]
                vals.append(r[0]["ratio"] if r and r[0]["ratio"] != "" else float("nan"))
            if all(v != v for v in vals):
                continue
            dat.append(("%s %s" % ({"memory": "bytes", "hits": "hits", "cpu": "ops/s"}[part],
                                   cid), vals + [targets.get((part, cid), float("nan"))]))
    return R.gnuplot_bars(
        dat, kuras + ["target"], out,
        "the cache over memcached: bytes an item, hit ratio at -m 64, small-value ops/s",
        "ratio to memcached", logscale=False, yformat="%.1f")


PARTS = {"memory": part_memory, "hits": part_hits, "cpu": part_cpu, "restart": part_restart}


def kurads(specs, build):
    """[(label, path)] from --kurad's LABEL=PATH or PATH values."""
    if not specs:
        return [("kura-cache", os.environ.get("KURAD") or os.path.join(build, "kurad"))]
    out = []
    for sp in specs:
        if "=" in sp:
            lab, path = sp.split("=", 1)
        else:
            path = sp
            d = os.path.dirname(os.path.abspath(path))
            lab = "kura@" + os.path.basename(os.path.dirname(d) if os.path.basename(d) == "build"
                                             else d)
        out.append((lab, os.path.abspath(path)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="where kura-bench and kura-hitbench are (and kurad by default)")
    ap.add_argument("--kurad", action="append", metavar="[LABEL=]PATH",
                    help="a kurad to measure (repeatable; default BUILD/kurad or $KURAD)")
    ap.add_argument("--parts", default="memory,hits,cpu,restart", help="comma list (default: all)")
    ap.add_argument("--reps", type=int, default=1,
                    help="repetitions of the memory, hits and restart parts (default 1)")
    ap.add_argument("--cpu-reps", type=int, default=3, help="repetitions of the cpu part")
    ap.add_argument("--items", type=int, default=1000000,
                    help="items of the memory and restart parts (default 1000000)")
    ap.add_argument("--hit-keys", type=int, default=2000000)
    ap.add_argument("--hit-mb", type=int, default=64, help="-m of the hits part (default 64)")
    ap.add_argument("--warmup", type=int, default=1000000)
    ap.add_argument("--requests", type=int, default=2000000)
    ap.add_argument("--cpu-ops", type=int, default=50000,
                    help="requests a cpu cell (default 50000)")
    ap.add_argument("--quick", action="store_true",
                    help="a tenth of the items and requests, 1 repetition: checks the pipeline")
    R.output_args(ap, "the clients")
    a = ap.parse_args(argv)
    # the command as the results show it: no path of this machine
    a.shown_args = "".join(" " + ("PATH" if x.startswith("/") else
                                  x.split("=")[0] + "=PATH" if "=/" in x else x)
                           for x in (argv if argv is not None else sys.argv[1:]))
    R.pin_defaults(a)
    if a.quick:
        a.reps, a.cpu_reps = 1, 1
        a.items, a.warmup, a.requests = a.items // 10, a.warmup // 10, a.requests // 10
        a.hit_keys, a.hit_mb = a.hit_keys // 10, max(8, a.hit_mb // 8)
        a.cpu_ops = a.cpu_ops // 10
    a.build = os.path.abspath(a.build)
    a.bench = os.path.join(a.build, "kura-bench")
    parts = [p for p in a.parts.split(",") if p]
    for p in parts:
        if p not in PARTS:
            sys.exit("cache.py: unknown part '%s' (%s)" % (p, ", ".join(PARTS)))
    servers = [Srv("memcached", "memcached", shutil.which("memcached") or "/usr/bin/memcached")]
    servers += [Srv(lab, "kurad", path) for lab, path in kurads(a.kurad, a.build)]
    for f in [s.binary for s in servers] + [a.bench, os.path.join(a.build, "kura-hitbench")]:
        if not os.access(f, os.X_OK):
            sys.exit("cache.py: %s not built (make %s)" % (f, os.path.relpath(f, ROOT)))
    os.makedirs(a.out, exist_ok=True)
    tmp_root = os.path.join(ROOT, "bench", "results", "tmp")
    os.makedirs(tmp_root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="cache-", dir=tmp_root)
    info, load0, t0 = R.machine_info(), R.loadavg(), time.monotonic()
    raw, failures = [], []
    log("issue 35's figures: parts %s; %s beside memcached; load average %s" % (
        ",".join(parts), ", ".join("%s (%s)" % (s.label, s.binary) for s in servers[1:]), load0))
    try:
        for p in parts:
            reps = a.cpu_reps if p == "cpu" else a.reps
            for rep in range(1, reps + 1):
                log("-- %s, rep %d/%d (%.0f s elapsed)" % (p, rep, reps, time.monotonic() - t0))
                try:
                    PARTS[p](a, servers, tmp, rep, raw)
                except (RuntimeError, OSError, ValueError, KeyError,
                        subprocess.TimeoutExpired) as e:
                    failures.append("%s rep %d: %s" % (p, rep, e))
                    log("  FAILED %s rep %d: %s" % (p, rep, e))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.monotonic() - t0
    rows = summarize(raw, servers)
    md = markdown(rows, raw, a, servers, info, load0, R.loadavg(), elapsed, failures)
    log("")
    log(md)
    R.save_results(a.out, "cache", rows, raw, md)
    plot(rows, servers, os.path.join(a.out, "cache.png"))
    if not a.no_docs and os.path.abspath(a.out) == os.path.abspath(R.RESULTS):
        if set(parts) != set(PARTS):
            log("\ndocs/benchmarks.md left alone: only a run of every part rewrites it")
        elif R.splice_docs(md, BEGIN, END):
            log("\ndocs/benchmarks.md updated")
    log("\nresults in %s (%.0f s)" % (os.path.relpath(a.out, ROOT), elapsed))
    return 1 if failures or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
