#!/usr/bin/python3
"""Restart of the hash file: time to serving and heap per item after it.

Starts kurad on a hash file, stores N items (21-byte keys and 150-byte
values by default: kura-bench's) with pipelined noreply sets, stops it
(SIGTERM: a clean stop, which writes a checkpoint), starts it again and
reports the time from the exec to the first get answered, and its anonymous
resident memory (RssAnon: the heap, not the page cache's mapped segments)
per item, the whole of it (an empty file's, shown beside, holds the index
tables its open made, which a loaded store's restart does not touch).

    bench/hash_restart.py [--items N] [--key-size B] [--value-size B]
                          [--build DIR] [--dir DIR] [--keep DB] [--restarts N]

With --keep DB the database is loaded only if DB does not exist, and kept:
restarts of two builds then compare the same files (a clean stop writes a
checkpoint or not depending on when the last background one was, so two
fresh loads may leave different amounts of log to replay).  --restarts N
restarts it N times, each line with kurad's CPU (utime + stime) by its
first get.
"""
import argparse, os, shutil, signal, socket, subprocess, tempfile, time

from memory import fill, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def start(build, db, port):
    user = ["-u", "root"] if os.geteuid() == 0 else []
    return subprocess.Popen([os.path.join(build, "kurad"), "-host", "127.0.0.1", "-port",
                             str(port), "-th", "2"] + user + [db],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def serving(proc, port, key, deadline=600.0):
    """Connects and gets key until it is answered; the connected socket."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit("kurad exited: %s" % proc.returncode)
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
        except OSError:
            time.sleep(0.002)
            continue
        s.sendall(b"get %s\r\n" % key)
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                raise SystemExit("connection closed")
            buf += chunk
        if not buf.startswith(b"VALUE"):
            raise SystemExit("key %r missing after the restart" % key)
        return s
    raise SystemExit("kurad did not serve within %.0f s" % deadline)


def key_of(i, ksize):
    return (b"key:%0*d" % (ksize - 4, i))


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=600)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=1000000)
    ap.add_argument("--key-size", type=int, default=21)
    ap.add_argument("--value-size", type=int, default=150)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dir", default=None, help="where the hash file goes (a temp dir)")
    ap.add_argument("--keep", default=None, help="the database to load once and keep")
    ap.add_argument("--restarts", type=int, default=1)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kura-restart-", dir=a.dir)
    try:
        # the same server on an empty file: the baseline
        port = free_port()
        p = start(a.build, os.path.join(tmp, "empty.kh"), port)
        s = None
        end = time.monotonic() + 60
        while s is None and time.monotonic() < end:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=60)
            except OSError:
                time.sleep(0.01)
        s.sendall(b"version\r\n")
        s.recv(100)
        base = status_kib(p.pid, "RssAnon")
        s.close()
        stop(p)

        db = a.keep or os.path.join(tmp, "data.kh")
        if a.keep and os.path.exists(db):
            return restarts(a, db, base)
        port = free_port()
        p = start(a.build, db, port)
        end = time.monotonic() + 60
        s = None
        while s is None and time.monotonic() < end:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=600)
            except OSError:
                time.sleep(0.01)
        t = time.monotonic()
        fill(s, a.items, a.value_size, lambda i: key_of(i, a.key_size))
        load = time.monotonic() - t
        s.close()
        stop(p)
        files = sum(os.path.getsize(os.path.join(db, f)) for f in os.listdir(db))
        print("items %d (keys %d B, values %d B): load %.2f s; files %.1f MB (%.0f B/item)"
              % (a.items, a.key_size, a.value_size, load, files / 1e6, files / a.items))
        restarts(a, db, base)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def restarts(a, db, base):
    for _ in range(a.restarts):
        port = free_port()
        t = time.monotonic()
        p = start(a.build, db, port)
        s = serving(p, port, key_of(a.items - 1, a.key_size))
        up = time.monotonic() - t
        anon = status_kib(p.pid, "RssAnon")
        with open("/proc/%d/stat" % p.pid) as f:
            st = f.read().rsplit(")", 1)[1].split()
        cpu = (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
        s.close()
        stop(p)
        # The whole RssAnon over the items is the figure: an empty file's
        # (the base) holds the tables its open made for bnum, resident from
        # the open, which a restart whose checkpoint replaces them never
        # touches, so "over the base" would understate a loaded store's heap.
        print("restart to serving: %.3f s (kurad's CPU %.2f s; load average %s); heap "
              "(RssAnon) after it: %.1f MB, %.1f B/item (an empty file's: %.1f MB)"
              % (up, cpu, open("/proc/loadavg").read().split()[0], anon / 1024,
                 anon * 1024.0 / a.items, base / 1024))


if __name__ == "__main__":
    main()
