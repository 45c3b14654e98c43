#!/usr/bin/python3
"""Memory per item: memcached beside kura's in-memory cache, on the same load.

Starts memcached and kurad (cache backend) with the same memory limit, stores
N items (12-byte keys, 100-byte values by default) in each with pipelined
noreply sets, and reports the growth of each process's resident memory per
item.  Both limits are set high enough that nothing is evicted.

    bench/memory.py [--items N] [--value-size B] [--build DIR]
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
    val = b"v" * vsize
    batch = []
    for i in range(n):
        batch.append(b"set %s 0 0 %d noreply\r\n%s\r\n" % (key(i), vsize, val))
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


def measure(name, cmd, port, n, vsize):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        s = connect(port, proc)
        before = rss_kib(proc.pid)
        fill(s, n, vsize)
        after = rss_kib(proc.pid)
        items = stat(s, "curr_items")
        s.close()
    finally:
        proc.terminate()
        proc.wait()
    per = (after - before) * 1024.0 / n
    print("%-10s items %-9s rss %7.1f MiB -> %7.1f MiB   %6.1f bytes per item"
          % (name, items, before / 1024.0, after / 1024.0, per), flush=True)
    return per


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=1000000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    limit_mb = str(max(64, a.items * (a.value_size + 200) // (1 << 20) * 2))
    user = ["-u", "root"] if os.geteuid() == 0 else []
    p1, p2 = free_port(), free_port()
    mc = measure("memcached", ["memcached", "-p", str(p1), "-l", "127.0.0.1", "-U", "0",
                               "-m", limit_mb] + user, p1, a.items, a.value_size)
    ku = measure("kura-cache", [os.path.join(a.build, "kurad"), "-port", str(p2), "-m", limit_mb]
                 + user + ["*"], p2, a.items, a.value_size)
    print("kura-cache / memcached: %.2f of the memory per item" % (ku / mc))


if __name__ == "__main__":
    sys.exit(main())
