#!/usr/bin/python3
"""Memory per item: memcached beside kura's in-memory cache, on the same load.

Starts memcached and kurad (cache backend) with the same memory limit, stores
N items (12-byte keys, 100-byte values by default) in each with pipelined
noreply sets, and reports the growth of each process's resident memory per
item.  Both limits are set high enough that nothing is evicted.
bench/cache.py runs the same fill for several item sizes and kurad builds.

    bench/memory.py [--items N] [--value-size B] [--build DIR] [--kurad PATH]
"""
import argparse, os, socket, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def settled_rss_kib(pid, deadline=20.0):
    """The RSS once it has stayed the same for half a second (polled), or at
    the deadline: memcached grows its hash table in a background thread,
    holding the old and the new table until the move is done."""
    end = time.monotonic() + deadline
    last, since = rss_kib(pid), time.monotonic()
    while time.monotonic() < end and time.monotonic() - since < 0.5:
        time.sleep(0.05)
        now = rss_kib(pid)
        if now != last:
            last, since = now, time.monotonic()
    return last


def connect(port, proc, deadline=10.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit("server exited: %s" % proc.returncode)
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            time.sleep(0.02)
    raise SystemExit("server did not listen on port %d" % port)


def fill(sock, n, vsize, key=lambda i: b"key:%08d" % i):
    """Sets keys 0..n-1 with noreply, pipelined, and waits until they are
    done; vsize: the value size, or a function of the key's index giving it."""
    size = vsize if callable(vsize) else (lambda i: vsize)
    vals = {}
    batch = []
    for i in range(n):
        vs = size(i)
        val = vals.get(vs) or vals.setdefault(vs, b"v" * vs)
        batch.append(b"set %s 0 0 %d noreply\r\n%s\r\n" % (key(i), vs, val))
        if len(batch) == 2000:
            sock.sendall(b"".join(batch))
            batch = []
    sock.sendall(b"".join(batch) + b"version\r\n")
    buf = b""
    while b"VERSION" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            raise SystemExit("connection closed while filling")
        buf += chunk


def stat(sock, name):
    sock.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        buf += sock.recv(65536)
    for line in buf.decode().split("\r\n"):
        parts = line.split()
        if len(parts) == 3 and parts[1] == name:
            return int(parts[2])
    return None


def measure(name, cmd, port, n, vsize, full=False):
    """Starts cmd (listening on port), fills it, stops it; the RSS growth per
    item (or, with full, a dict of it, the items counted and both RSS)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        s = connect(port, proc)
        before = rss_kib(proc.pid)
        fill(s, n, vsize)
        after = settled_rss_kib(proc.pid)
        items = stat(s, "curr_items")
        s.close()
    finally:
        proc.terminate()
        proc.wait()
    per = (after - before) * 1024.0 / n
    print("%-10s items %-9s rss %7.1f MiB -> %7.1f MiB   %6.1f bytes per item"
          % (name, items, before / 1024.0, after / 1024.0, per), flush=True)
    if full:
        return dict(per_item=per, items=items, rss_before_kib=before, rss_after_kib=after)
    return per


def server_cmd(kind, binary, port, limit_mb, extra=()):
    """The command line of memcached or kurad's cache with memory limit
    limit_mb, listening on port (the same for both: their defaults beside)."""
    user = ["-u", "root"] if os.geteuid() == 0 else []
    if kind == "memcached":
        return [binary, "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", str(limit_mb)] \
            + user + list(extra)
    return [binary, "-port", str(port), "-m", str(limit_mb)] + user + list(extra) + ["*"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=1000000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--kurad", help="the kurad to measure (default: BUILD/kurad)")
    a = ap.parse_args()
    limit_mb = max(64, a.items * (a.value_size + 200) // (1 << 20) * 2)
    p1, p2 = free_port(), free_port()
    mc = measure("memcached", server_cmd("memcached", "memcached", p1, limit_mb), p1,
                 a.items, a.value_size)
    ku = measure("kura-cache", server_cmd("kurad", a.kurad or os.path.join(a.build, "kurad"),
                                          p2, limit_mb), p2, a.items, a.value_size)
    print("kura-cache / memcached: %.2f of the memory per item" % (ku / mc))


if __name__ == "__main__":
    sys.exit(main())
