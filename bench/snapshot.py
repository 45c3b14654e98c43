#!/usr/bin/python3
"""Snapshots measured on Kyoto Tycoon's published workload (`make
bench-snapshot`): 10 million sets of 21-byte keys and 150-byte values into
a hash file, then a snapshot with each codec, a restore from each, and the
latency of a 16-connection get/set load with and without a snapshot
running.

  load       kura-bench sets every key once (sequential keys
             "snapbench:key:<n>", 21 bytes for most n), 16 connections;
             the database's size on disk after a clean stop (du).
  snapshot   kurad restarted on that database with -bgsc CODEC, "snapshot"
             asked for: its size and the time kurad reports.
  raw        the raw key-value stream (each item's key, a tab, its value, a
             newline, in the order `kuractl dump` walks the hash file)
             compressed by `lzop -1`, `gzip -6` and `bzip2 -9` (Debian's
             lzop, gzip, bzip2): what a snapshot of the same codec is
             compared with (snapshot bytes / tool's bytes).
  restore    a new kurad on a missing database with -bgs holding only that
             snapshot: the seconds until it listens (the load included) and
             its peak RSS by then (VmHWM in /proc).
  baseline   with --baseline BUILD (another build, e.g. the last release's),
             its kurad takes the snapshot and restores it on the same
             database in the same run: the speed ratios are new / baseline.
  latency    16 connections of 1:1 get/set (uniform keys over the data set,
             150-byte values) for the time of an lzo and of a zlib
             snapshot, and the same load alone for as long: p50/p99/p999
             and the largest reply time of each.

With --load-only, the load alone, and where the database's bytes go:
segment files (record headers: their bytes less the segment headers and
the keys and values), checkpoints, and blocks allocated past the files'
ends (a preallocated tail), each in bytes an item.

    bench/snapshot.py --load-only --no-docs     # the hash file's footprint

Servers run pinned to CPU 0, kura-bench to CPU 1, as bench/run.py does.
Results: a table on stdout, bench/results/snapshot.csv and .png, and the
section of docs/benchmarks.md between its SNAPSHOT RESULTS markers.

    bench/snapshot.py                   # 10,000,000 items (about 10 minutes)
    bench/snapshot.py --items 1000000   # a tenth
"""
import argparse, csv, datetime, glob, json, os, shutil, socket, subprocess, sys
import tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R          # noqa: E402  (bench/run.py: ports, pinning, plots)
from repl import Kurad, stats   # noqa: E402

ROOT = R.ROOT
CODECS = ["none", "lzo", "zlib", "bz2"]
RAW_TOOLS = {"lzo": ["lzop", "-1", "-c"], "zlib": ["gzip", "-6", "-c"], "bz2": ["bzip2", "-9", "-c"]}
PREFIX = "snapbench:key:"


def du(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
    return total


def raw_stream(a, data, path):
    """Writes the raw key-value stream of the hash file at data to path
    (key TAB value NL per item, in the dump's order): its length."""
    kuractl = os.path.join(a.build, "kuractl")
    p = subprocess.Popen([kuractl, "-q", "dump", data, "--format", "memcached"],
                         stdout=subprocess.PIPE)
    n = 0
    with open(path, "wb") as out:
        f = p.stdout
        for head in iter(f.readline, b""):
            w = head.split()
            if len(w) < 5 or w[0] != b"set":
                continue
            v = f.read(int(w[4]) + 2)[:-2]
            out.write(w[1] + b"\t" + v + b"\n")
            n += len(w[1]) + len(v) + 2
    if p.wait() != 0:
        raise SystemExit("snapshot.py: kuractl dump failed")
    return n


def squeezed(tool, path):
    """The size of path compressed by tool (argv writing to stdout) and the seconds."""
    t0 = time.monotonic()
    with open(path, "rb") as f:
        p = subprocess.run(tool, stdin=f, stdout=subprocess.PIPE, check=True)
    return len(p.stdout), time.monotonic() - t0


def peak_rss(pid):
    """VmHWM of a running process, bytes (0 if unknown)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for ln in f:
                if ln.startswith("VmHWM:"):
                    return int(ln.split()[1]) * 1024
    except OSError:
        pass
    return 0


def breakdown(path, items, keys):
    """Where a hash file's bytes go, in bytes an item: each part's size, and
    the segments' record headers (segment bytes less their 32-byte headers
    and the keys and values; a few state records included)."""
    parts = {"segments": 0, "checkpoint": 0, "checkpoint.prev": 0, "other": 0}
    nseg, alloc, apparent = 0, 0, 0
    for f in sorted(os.listdir(path)):
        st = os.lstat(os.path.join(path, f))
        apparent += st.st_size
        alloc += st.st_blocks * 512
        if f.endswith(".seg"):
            parts["segments"] += st.st_size
            nseg += 1
        elif f in parts:
            parts[f] += st.st_size
        else:
            parts["other"] += st.st_size
    body = sum(len(PREFIX) + len(str(i)) + 150 for i in range(keys))
    n = max(items, 1)
    rows = [(k, v / n) for k, v in parts.items()]
    rows.insert(1, ("  record headers", (parts["segments"] - 32 * nseg - body) / n))
    rows.append(("blocks allocated past the ends", max(alloc - apparent, 0) / n))
    rows.append(("whole directory (apparent size)", apparent / n))
    return rows


def bench_cmd(a, port, extra):
    return R.taskset(a.client_cpus) + [a.bench, "-p", str(port), "--threads", "1",
                                       "--conns", "16", "--value-size", "150",
                                       "--key-prefix", PREFIX, "--keys", str(a.items),
                                       "--json", "--quiet", "--timeout", "120"] + extra


def run_bench(a, port, extra):
    p = subprocess.run(bench_cmd(a, port, extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode != 0:
        raise SystemExit("snapshot.py: kura-bench failed: " + p.stderr[-500:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def snapshot_now(port, timeout=3600):
    before = int(stats(port, b"snapshot")["snapshot_count"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"snapshot\r\n")
        assert s.recv(100) == b"OK\r\n"
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = stats(port, b"snapshot")
        if int(st["snapshot_failures"]):
            raise SystemExit("snapshot.py: snapshot failed: " + st["snapshot_last_error"])
        if int(st["snapshot_count"]) > before:
            return st
        time.sleep(0.05)
    raise SystemExit("snapshot.py: the snapshot did not end")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--items", type=int, default=10000000)
    ap.add_argument("--codecs", default=",".join(CODECS))
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--tmp", default=None, help="where the data goes (default: the system's)")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--baseline", default=None,
                    help="another build directory whose kurad is measured beside (speed ratios)")
    ap.add_argument("--load-only", action="store_true",
                    help="the load and the database's footprint, no snapshots")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)     # servers run in their own directories
    a.kurad = os.path.join(a.build, "kurad")
    a.bench = os.path.join(a.build, "kura-bench")
    for f in (a.kurad, a.bench):
        if not os.access(f, os.X_OK):
            sys.exit("snapshot.py: no %s (make %s)" % (f, os.path.relpath(f, ROOT)))
    for t in RAW_TOOLS.values():
        if not shutil.which(t[0]):
            sys.exit("snapshot.py: no %s (apt-get install lzop gzip bzip2)" % t[0])
    base = None
    if a.baseline:
        base = argparse.Namespace(**vars(a))
        base.kurad = os.path.join(os.path.abspath(a.baseline), "kurad")
        if not os.access(base.kurad, os.X_OK):
            sys.exit("snapshot.py: no %s" % base.kurad)
    codecs = a.codecs.split(",")
    tmp = tempfile.mkdtemp(prefix="kura-snap-bench-", dir=a.tmp)
    rows = []
    lat = []
    try:
        data = os.path.join(tmp, "main")
        os.makedirs(data)
        R.log("== load: %d sets of 150-byte values, 16 connections ==" % a.items)
        k = Kurad(a, tmp, "load", ["-bgs", "DIR/snap", "-bgsi", "0", "DIR/data.kh"],
                  datadir=data).start(timeout=600)
        t0 = time.monotonic()
        j = run_bench(a, k.port, ["--ratio", "1:0", "--pattern", "seq", "--ops", str(a.items)])
        load_s = time.monotonic() - t0
        items = int(stats(k.port)["curr_items"])
        k.stop()
        db_bytes = du(os.path.join(data, "data.kh"))
        R.log("  %d items in %.1f s (%s sets/s); database %.2f GB on disk" % (
            items, load_s, R.fmt_rate(j["ops_per_sec"]), db_bytes / 1e9))
        if a.load_only:
            for name, per in breakdown(os.path.join(data, "data.kh"), items, a.items):
                R.log("  %-32s %7.1f bytes an item" % (name, per))
            return
        rawp = os.path.join(tmp, "raw.kv")
        raw = {"none": raw_stream(a, os.path.join(data, "data.kh"), rawp)}
        R.log("  raw key-value stream %.1f MB (%.1f bytes an item)" % (raw["none"] / 1e6,
                                                                     raw["none"] / max(items, 1)))
        for codec in codecs:
            if codec in RAW_TOOLS:
                raw[codec], secs = squeezed(RAW_TOOLS[codec], rawp)
                R.log("  %s: %.1f MB (%.1f bytes an item) in %.1f s" % (
                    " ".join(RAW_TOOLS[codec][:2]), raw[codec] / 1e6, raw[codec] / items, secs))
        os.unlink(rawp)
        for codec in codecs:
            if base:
                brow = snap_and_restore(base, tmp, data, codec, "base-")
            row = snap_and_restore(a, tmp, data, codec, "", lat)
            row.update({"items": items, "db_bytes": db_bytes, "raw_bytes": raw.get(codec, 0),
                        "raw_stream": raw["none"]})
            if base:
                row.update({"base_snap_bytes": brow["snap_bytes"], "base_snap_s": brow["snap_s"],
                            "base_restore_s": brow["restore_s"],
                            "base_restore_rss": brow["restore_rss"]})
            rows.append(row)
            R.log("  %-5s snapshot %8.1f MB in %6.1f s; restored %d items in %.1f s, peak RSS "
                  "%.0f MB%s" % (codec, row["snap_bytes"] / 1e6, row["snap_s"],
                                 row["restored_items"], row["restore_s"],
                                 row["restore_rss"] / 1e6,
                                 "; x%.2f the raw stream's %s" % (
                                     row["snap_bytes"] / raw[codec], RAW_TOOLS[codec][0])
                                 if codec in RAW_TOOLS else ""))
            for f in glob.glob(os.path.join(data, "snap", "*.ksnap")):
                os.unlink(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish(rows, lat, a, load_s, j)


def snap_and_restore(a, tmp, data, codec, tag, lat=None):
    """A snapshot of data with codec by a's kurad, then a restore from it."""
    k = Kurad(a, tmp, tag + "snap-" + codec, ["-bgs", "DIR/snap", "-bgsi", "0", "-bgsc",
                                               codec, "DIR/data.kh"],
              datadir=data).start(timeout=600)
    st = snapshot_now(k.port)
    if lat is not None and codec in ("lzo", "zlib"):
        # the same load with a snapshot running, then alone for as long
        with socket.create_connection(("127.0.0.1", k.port), timeout=10) as s:
            s.sendall(b"snapshot\r\n")
            s.recv(100)
        secs = max(2.0, int(st["snapshot_last_ms"]) / 1000.0)
        during = run_bench(a, k.port, ["--ratio", "1:1", "--duration", "%.1f" % secs])
        while stats(k.port, b"snapshot")["snapshot_running"] != "0":
            time.sleep(0.05)
        alone = run_bench(a, k.port, ["--ratio", "1:1", "--duration", "%.1f" % secs])
        for name, r in (("alone", alone), ("during " + codec, during)):
            lat.append({"case": name, "seconds": round(secs, 1),
                        "ops_s": round(r["ops_per_sec"]), "p50_us": r["p50_us"],
                        "p99_us": r["p99_us"], "p999_us": r["p999_us"],
                        "max_us": r["max_us"]})
        R.log("  16 conns get/set for %.1f s: alone p99 %.0f us, during a %s snapshot "
              "p99 %.0f us (x%.2f)" % (secs, alone["p99_us"], codec, during["p99_us"],
                                       during["p99_us"] / max(alone["p99_us"], 1)))
        st = stats(k.port, b"snapshot")
    k.stop()
    path = st["snapshot_last_path"]
    size = os.path.getsize(path)
    # restore: a new server on a missing database, this snapshot only
    rdir = os.path.join(tmp, tag + "restore-" + codec)
    os.makedirs(os.path.join(rdir, "snap"))
    os.link(path, os.path.join(rdir, "snap", os.path.basename(path)))
    t0 = time.monotonic()
    r = Kurad(a, tmp, tag + "restore-" + codec, ["-bgs", "DIR/snap", "-bgsi", "0",
                                                  "DIR/data.kh"],
              datadir=rdir).start(timeout=3600)
    restore_s = time.monotonic() - t0
    rss = peak_rss(r.proc.pid)
    ritems = int(stats(r.port)["curr_items"])
    r.stop()
    shutil.rmtree(rdir, ignore_errors=True)
    os.unlink(path)
    return {"codec": codec, "snap_bytes": size,
            "snap_s": int(st["snapshot_last_ms"]) / 1000.0,
            "restore_s": round(restore_s, 2), "restore_rss": rss,
            "restored_items": ritems}


def finish(rows, lat, a, load_s, j):
    os.makedirs(R.RESULTS, exist_ok=True)
    with open(os.path.join(R.RESULTS, "snapshot.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    bars = [(r["codec"], [r["snap_bytes"] / max(r["items"], 1), r["snap_s"], r["restore_s"]])
            for r in rows]
    R.gnuplot_bars(bars, ["snapshot bytes an item", "snapshot seconds", "restore seconds"],
                   os.path.join(R.RESULTS, "snapshot.png"),
                   "%d items of 150 bytes: snapshot size and time per codec" % rows[0]["items"],
                   "bytes / seconds", logscale=False)
    md = markdown(rows, lat, a, load_s, j)
    with open(os.path.join(R.RESULTS, "snapshot.md"), "w") as f:
        f.write(md)
    R.log("\n" + md)
    if not a.no_docs:
        splice(md)


def markdown(rows, lat, a, load_s, j):
    out = ["Measured %s on %s (server on CPU %s, kura-bench on CPU %s); "
           "`bench/snapshot.py --items %d%s`." % (
               datetime.date.today().isoformat(), R.machine_info().get("cpu", "this machine"),
               a.server_cpus, a.client_cpus, a.items,
               " --baseline BUILD" if a.baseline else ""), ""]
    r0 = rows[0]
    out.append("%d sets of 150-byte values with 21-byte keys took %.0f s (%s sets/s); the hash "
               "file holds them in %.2f GB (%.0f bytes an item)." % (
                   r0["items"], load_s, R.fmt_rate(j["ops_per_sec"]), r0["db_bytes"] / 1e9,
                   r0["db_bytes"] / max(r0["items"], 1)))
    out += ["", "The raw key-value stream (key, tab, value, newline per item) is %.1f MB (%.1f "
            "bytes an item); each codec's snapshot beside the same stream compressed by "
            "`lzop -1`, `gzip -6` and `bzip2 -9`. Restore: start to listening, the load "
            "included, and the server's peak RSS by then (VmHWM)." % (
                r0["raw_stream"] / 1e6, r0["raw_stream"] / max(r0["items"], 1)), ""]
    base = "base_snap_s" in r0
    head = "| codec | snapshot | bytes an item | raw stream by the tool | snapshot / tool | " \
           "time | restore | restore peak RSS |"
    if base:
        head += " baseline: bytes an item, time, restore, RSS | time new / baseline | " \
                "restore new / baseline |"
    out += [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        n = max(r["items"], 1)
        tool = "%s: %.1f" % (RAW_TOOLS.get(r["codec"], ["as it is"])[0], r["raw_bytes"] / n) \
            if r["raw_bytes"] else "-"
        ratio = "%.2f" % (r["snap_bytes"] / r["raw_bytes"]) if r["raw_bytes"] else "-"
        ln = "| %s | %.1f MB | %.1f | %s | %s | %.1f s | %.1f s | %.0f MB |" % (
            r["codec"], r["snap_bytes"] / 1e6, r["snap_bytes"] / n, tool, ratio, r["snap_s"],
            r["restore_s"], r["restore_rss"] / 1e6)
        if base:
            ln += " %.1f, %.1f s, %.1f s, %.0f MB | %.2f | %.2f |" % (
                r["base_snap_bytes"] / n, r["base_snap_s"], r["base_restore_s"],
                r["base_restore_rss"] / 1e6, r["snap_s"] / max(r["base_snap_s"], 0.001),
                r["restore_s"] / max(r["base_restore_s"], 0.001))
        out.append(ln)
    if lat:
        out += ["", "16 connections of 1:1 get/set over the data set, for as long as a snapshot "
                "takes, alone and while one runs:", "",
                "| case | ops/s | p50 | p99 | p99.9 | max |", "|---|---|---|---|---|---|"]
        for l in lat:
            out.append("| %s | %s | %.0f us | %.0f us | %.0f us | %.1f ms |" % (
                l["case"], R.fmt_rate(l["ops_s"]), l["p50_us"], l["p99_us"], l["p999_us"],
                l["max_us"] / 1000))
    out += ["", "![snapshot size and time per codec](../bench/results/snapshot.png)"]
    return "\n".join(out) + "\n"


def splice(md):
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    text = open(path).read()
    b = "<!-- BEGIN SNAPSHOT RESULTS (bench/snapshot.py rewrites this part) -->"
    e = "<!-- END SNAPSHOT RESULTS -->"
    i, j = text.find(b), text.find(e)
    if i < 0 or j < i:
        text = text.rstrip() + "\n\n## Snapshots\n\n" + b + "\n" + e + "\n"
        i, j = text.find(b), text.find(e)
    with open(path, "w") as f:
        f.write(text[:i + len(b)] + "\n" + md.rstrip() + "\n" + text[j:])


if __name__ == "__main__":
    main()
