#!/usr/bin/python3
"""What idle replication streams cost a master: memory and threads
(docs/benchmarks.md, "Idle replication streams").

A kurad master (-ulog, a hash file) is given a few MB of data (so its
update log's file is larger than a reader's 1 MB read window), then N
fake replicas (default 1,000) each ask for the log from its newest row and
then read only what heartbeats bring, as an idle replica does.  Printed:
the master's RSS (VmRSS) and thread count before and with the streams,
and the difference per stream.

    bench/repl_streams.py --build build [--streams 1000]
"""
import argparse, os, resource, shutil, socket, subprocess, sys, tempfile, time


def proc_status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            k, _, v = ln.partition(":")
            out[k] = v.strip()
    return int(out["VmRSS"].split()[0]) * 1024, int(out["Threads"])


def request(port, data, end=b"\r\n"):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        buf = b""
        while not buf.endswith(end):
            d = s.recv(65536)
            if not d:
                break
            buf += d
        return buf


def stat(port, name, sub=b""):
    for ln in request(port, b"stats" + (b" " + sub if sub else b"") + b"\r\n",
                      b"END\r\n").split(b"\r\n"):
        p = ln.split(b" ")
        if len(p) == 3 and p[1] == name.encode():
            return p[2].decode()
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--data-mb", type=int, default=4)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.streams + 200
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    tmp = tempfile.mkdtemp(prefix="kura-bench-streams-")
    port = free_port()
    argv = [os.path.join(a.build, "kurad"), "-port", str(port), "-sid", "1",
            "-ulog", os.path.join(tmp, "ul"), "-repl-max", str(a.streams),
            "-c", str(a.streams + 100), os.path.join(tmp, "m.kh")]
    if os.geteuid() == 0:
        argv[1:1] = ["-u", "root"]
    srv = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "log"), "w"))
    socks = []
    try:
        end = time.monotonic() + 20
        while True:
            try:
                request(port, b"version\r\n")
                break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        v = b"v" * 65536
        for i in range(a.data_mb * 16):
            request(port, b"set k%d 0 0 %d\r\n%s\r\n" % (i, len(v), v))
        last = int(stat(port, "ulog_last_ts"))
        time.sleep(1)
        rss0, th0 = proc_status(srv.pid)
        for i in range(a.streams):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(b"repl %d %d\r\n" % (last, 2 + i))
            socks.append(s)
        for s in socks:
            buf = b""
            while b"\r\n" not in buf:
                buf += s.recv(4096)
            assert buf.startswith(b"REPL "), buf
        end = time.monotonic() + 60
        while stat(port, "repl_replicas") != str(a.streams):
            if time.monotonic() > end:
                raise SystemExit("the streams did not all connect")
            time.sleep(0.2)
        time.sleep(2)                       # a heartbeat or two on each
        rss1, th1 = proc_status(srv.pid)
        print("streams %d: master RSS %.1f MB -> %.1f MB (+%.1f MB, %.1f KB a stream), "
              "threads %d -> %d" % (a.streams, rss0 / 2**20, rss1 / 2**20, (rss1 - rss0) / 2**20,
                                    (rss1 - rss0) / 1024 / a.streams, th0, th1))
    finally:
        for s in socks:
            s.close()
        srv.terminate()
        srv.wait()
        shutil.rmtree(tmp, True)


if __name__ == "__main__":
    main()
