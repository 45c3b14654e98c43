#!/usr/bin/python3
"""How long one client's get waits while another client lists keys.

Starts kurad with one worker thread (so both clients share it) on the
in-memory cache (or --db: a hash file NAME.kh or a tree NAME.kb, made in a
temporary directory), stores N items, times the listing alone (the median
of three runs, wall time and the server's CPU time: what the slicing
costs the listing itself), then runs the
listing in a loop on one connection, reading as fast as it can, while a
second connection sends a get every 5 ms and times each reply.  Reports
the listing's time alone and the gets' p50, p99 and max.  With --kurad OLD
it runs the same load against another build first, for a before/after in
one run.  The listings by default: metadump, keys, keys limit=100000,
rget (100000 keys in key order, with values) and digest 256.

    bench/stall.py [--items N] [--seconds S] [--build DIR] [--kurad PATH ...]
                   [--inline] [--db '*'|x.kh|x.kb] [--request "lru_crawler metadump all"] ...
"""
import argparse, os, shutil, socket, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(port, proc, deadline=10.0):
    end = time.monotonic() + deadline
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port))
        except OSError:
            if proc.poll() is not None or time.monotonic() > end:
                raise
            time.sleep(0.05)


def read_to_end(sock, keep=16):
    """Reads a reply through its END line; returns the last bytes."""
    tail = b""
    while not tail.endswith(b"END\r\n"):
        d = sock.recv(1 << 20)
        if not d:
            raise ConnectionError("closed")
        tail = (tail + d)[-keep:]
    return tail


def server_cpu(sock):
    """The server's user + system CPU seconds so far (stats rusage_*)."""
    sock.sendall(b"stats\r\n")
    data = b""
    while not data.endswith(b"END\r\n"):
        d = sock.recv(1 << 16)
        if not d:
            raise ConnectionError("closed")
        data += d
    st = dict(l.split()[1:3] for l in data.decode().split("\r\n") if l.startswith("STAT "))
    return float(st["rusage_user"]) + float(st["rusage_system"])


def run(kurad, items, seconds, request, db, env=None):
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="kura-stall-")
    argv = [kurad, "-p", str(port), "-t", "1", "-m", "4096",
            db if db == "*" else os.path.join(tmp, db)]
    if os.geteuid() == 0:
        argv[1:1] = ["-u", "root"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, **env) if env else None)
    try:
        s = connect(port, proc)
        for b in range(0, items, 5000):
            s.sendall(b"".join(b"set key:%08d 0 0 10 noreply\r\n0123456789\r\n" % i
                               for i in range(b, min(items, b + 5000))))
        s.settimeout(120)
        s.sendall(b"get key:00000000\r\n")
        read_to_end(s)
        a = connect(port, proc)
        a.settimeout(300)
        alone, cpu = [], []
        for _ in range(3):
            c0 = server_cpu(s)
            t0 = time.perf_counter()
            a.sendall(request)
            read_to_end(a)
            alone.append(time.perf_counter() - t0)
            cpu.append(server_cpu(s) - c0)
        a.close()
        alone, cpu = sorted(alone)[1], sorted(cpu)[1]
        stop = threading.Event()

        def lister():
            a = connect(port, proc)
            while not stop.is_set():
                a.sendall(request)
                read_to_end(a)
            a.close()
        t = threading.Thread(target=lister, daemon=True)
        t.start()
        time.sleep(0.3)                         # the listing is under way
        lat, end = [], time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            s.sendall(b"get key:00000001\r\n")
            read_to_end(s)
            lat.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.005)
        stop.set()
        t.join(60)
        lat.sort()
        return (alone, cpu, len(lat), lat[len(lat) // 2],
                lat[min(len(lat) - 1, int(len(lat) * 0.99))], lat[-1])
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=500000)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--kurad", action="append", default=[],
                    help="another kurad to measure first (repeatable)")
    ap.add_argument("--inline", action="store_true",
                    help="also this build with KURA_TEST_LIST_INLINE=1 (each walk whole in "
                         "one call, unsliced): what the slicing itself costs; a test "
                         "tree's kurad only (--build build-test: a release kurad reads "
                         "no test variable)")
    ap.add_argument("--db", default="*",
                    help="the database: * (the cache, default), NAME.kh or NAME.kb")
    ap.add_argument("--request", action="append", default=[],
                    help="the listing (default: metadump, keys, keys limit=100000, rget, "
                         "digest 256)")
    a = ap.parse_args()
    requests = a.request or ["lru_crawler metadump all", "keys", "keys limit=100000",
                             "rget key:00000000 key:99999999 0 0 100000", "digest 256"]
    builds = [(k, k, None) for k in a.kurad + [os.path.join(a.build, "kurad")]]
    if a.inline:
        k = os.path.join(a.build, "kurad")
        builds.append((k + " (inline)", k, {"KURA_TEST_LIST_INLINE": "1"}))
    print("%-32s %-4s %-28s %8s %8s %6s %9s %9s %9s" % ("kurad", "db", "listing", "alone s",
                                                         "cpu s", "gets", "p50 ms", "p99 ms",
                                                         "max ms"))
    for req in requests:
        for label, k, env in builds:
            alone, cpu, n, p50, p99, mx = run(k, a.items, a.seconds, req.encode() + b"\r\n",
                                              a.db, env)
            print("%-32s %-4s %-28s %8.3f %8.3f %6d %9.2f %9.1f %9.1f"
                  % (label[-32:], a.db[-4:], req[:28], alone, cpu, n, p50, p99, mx))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
