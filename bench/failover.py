#!/usr/bin/python3
"""How long a failover by command takes under write load.

Starts master M (-ulog, hash file) with replicas R1 and R3, and R2, a
replica of R1 (a chain).  A writer sets keys on M as fast as one
connection goes.  Then, timed from just before the first command:
`kuractl repl promote R1`, the writer moves to R1, `kuractl repl follow R3
R1` and `kuractl repl follow M R1` (the old master joins as a replica);
the clock stops once a key written on R1 after the promotion is on R2, R3
and M (the writer's last write on M answered before that key is set).
Reports each run's total and the promote command's own time;
medians over the runs.

    bench/failover.py [--runs N] [--build DIR]
"""
import argparse, os, shutil, socket, statistics, subprocess, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, data, timeout=10):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        while not (buf.endswith(b"\r\n") and (buf.endswith(b"END\r\n") or not data.startswith((b"get", b"stats")))):
            d = s.recv(65536)
            if not d:
                break
            buf += d
        return buf


class Kurad:
    def __init__(self, build, sid, master=None):
        self.dir = tempfile.mkdtemp(prefix="kura-failover-")
        self.port = free_port()
        argv = [os.path.join(build, "kurad"), "-port", str(self.port), "-sid", str(sid),
                "-ulog", os.path.join(self.dir, "ulog"), os.path.join(self.dir, "data.kh")]
        if os.geteuid() == 0:
            argv[1:1] = ["-u", "root"]
        if master:
            argv[1:1] = ["-mhost", "127.0.0.1", "-mport", str(master.port)]
        self.proc = subprocess.Popen(argv, stderr=open(os.path.join(self.dir, "log"), "wb"))
        end = time.monotonic() + 10
        while True:
            try:
                request(self.port, b"version\r\n")
                return
            except OSError:
                if time.monotonic() > end or self.proc.poll() is not None:
                    raise
                time.sleep(0.02)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(20)
        shutil.rmtree(self.dir, ignore_errors=True)


def writer(state):
    i = 0
    conn, on = None, None
    while not state["stop"]:
        try:
            if on != state["target"]:
                if conn:
                    conn.close()
                on = state["target"]
                conn = socket.create_connection(("127.0.0.1", on), timeout=10)
                state["on"] = on
            v = b"%d" % i
            conn.sendall(b"set w%d 0 0 %d\r\n%s\r\n" % (i % 10000, len(v), v))
            r = conn.recv(100)
            if r == b"STORED\r\n":
                state["done"] += 1
            i += 1
        except OSError:
            conn, on = None, None
            time.sleep(0.005)
    if conn:
        conn.close()


def has(port, key, val):
    return request(port, b"get %s\r\n" % key).startswith(b"VALUE %s 0 %d\r\n%s" % (key, len(val), val))


def one_run(build, n):
    kuractl = os.path.join(build, "kuractl")
    m = Kurad(build, 1)
    r1 = Kurad(build, 2, m)
    r3 = Kurad(build, 3, m)
    r2 = Kurad(build, 4, r1)
    servers = [m, r1, r2, r3]
    try:
        state = {"stop": False, "target": m.port, "done": 0, "on": None}
        t = threading.Thread(target=writer, args=(state,), daemon=True)
        t.start()
        end = time.monotonic() + 30
        while state["done"] < 2000 and time.monotonic() < end:
            time.sleep(0.05)
        a = "127.0.0.1:%d"
        t0 = time.monotonic()
        subprocess.run([kuractl, "repl", "promote", a % r1.port], check=True,
                       stdout=subprocess.DEVNULL)
        t_promote = time.monotonic() - t0
        state["target"] = r1.port
        # the writer's last write on M is answered before the mark is set on
        # R1: R3's position counts in M's timestamps, and a row of M's
        # newer than the mark would put it past the mark in R1's log (the
        # update log's id, hid, makes R1 send such a replica everything)
        while state["on"] != r1.port:
            time.sleep(0.001)
        key, val = b"marker%d" % n, b"after-promotion"
        assert request(r1.port, b"set %s 0 0 %d\r\n%s\r\n" % (key, len(val), val)) == b"STORED\r\n"
        subprocess.run([kuractl, "repl", "follow", a % r3.port, a % r1.port], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([kuractl, "repl", "follow", a % m.port, a % r1.port], check=True,
                       stdout=subprocess.DEVNULL)
        waiting = {r2.port, r3.port, m.port}
        end = time.monotonic() + 60
        while waiting and time.monotonic() < end:
            waiting = {p for p in waiting if not has(p, key, val)}
            time.sleep(0.005)
        total = time.monotonic() - t0
        state["stop"] = True
        t.join(10)
        if waiting:
            for s in servers:
                if s.port in waiting:
                    print(request(s.port, b"stats repl\r\n").decode())
                    print(open(os.path.join(s.dir, "log")).read()[-3000:])
            raise SystemExit("run %d: not every server had the new master's write in 60 s"
                             % (n + 1))
        return total, t_promote
    finally:
        for s in servers:
            s.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    o = ap.parse_args()
    totals, promotes = [], []
    for n in range(o.runs):
        total, p = one_run(o.build, n)
        totals.append(total)
        promotes.append(p)
        print("run %d: every server has the new master's write %.3f s after the promote "
              "command began (promote itself %.3f s)" % (n + 1, total, p), flush=True)
    print("median %.3f s (max %.3f s); promote median %.3f s"
          % (statistics.median(totals), max(totals), statistics.median(promotes)))


if __name__ == "__main__":
    main()
