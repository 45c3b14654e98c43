#!/usr/bin/python3
"""bench/tls.py - what TLS costs: sets and gets over TLS (kurad -Z) as a
ratio of the same over plaintext, one kurad serving both (a notls: listener
beside the TLS port), 16 connections, in one run; then memcached -Z the
same way, for reference (--servers kurad to leave it out).

kurad is pinned to CPU 0 and kura-bench (--tls-ca for the TLS runs) to CPU
1 when there are two; each cell is the median of --reps runs, TLS and
plaintext alternating so that a change in the machine's load falls on both.
The certificates are made with the openssl command in a temp dir.

    python3 bench/tls.py --build build [--reps 3] [--ops 200000] [--value 32]
                         [--servers kurad,memcached]
"""
import argparse, csv, os, shutil, socket, statistics, subprocess, sys, tempfile, time

CONNS = 16
KEYS = 20000
CELLS = [("set", ["-r", "1:0"]), ("get", ["-r", "0:1", "--prefill"]),
         ("get 1:9", ["-r", "1:9", "--prefill"])]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin(cpu):
    if shutil.which("taskset") and os.cpu_count() and os.cpu_count() >= 2:
        return ["taskset", "-c", str(cpu)]
    return []


def certs(d):
    def sh(*a):
        subprocess.run(list(a), cwd=d, check=True, capture_output=True)
    with open(os.path.join(d, "san"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
       "ca.pem", "-days", "2", "-subj", "/CN=bench ca")
    sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out",
       "srv.csr", "-subj", "/CN=127.0.0.1")
    sh("openssl", "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
       "-CAcreateserial", "-out", "srv.pem", "-days", "2", "-extfile", "san")


def start(build, d, server):
    tls, plain = free_port(), free_port()
    certs = "ssl_chain_cert=%s,ssl_key=%s" % (os.path.join(d, "srv.pem"),
                                              os.path.join(d, "srv.key"))
    if server == "memcached":
        argv = pin(0) + ["memcached", "-U", "0", "-p", str(tls), "-t", "4", "-m", "1024",
                         "-l", "127.0.0.1,notls:127.0.0.1:%d" % plain, "-Z", "-o", certs]
    else:
        argv = pin(0) + [os.path.join(build, "kurad"), "-p", str(tls), "-t", "4", "-m", "1024",
                         "-host", "127.0.0.1,notls:127.0.0.1:%d" % plain, "-Z", "-o", certs,
                         "*"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", plain)).close()
            return proc, tls, plain
        except OSError:
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit("%s -Z did not start" % server)
            time.sleep(0.05)


def bench(build, port, args, ops, value, ca=None):
    argv = pin(1) + [os.path.join(build, "kura-bench"), "-p", str(port), "-k", str(KEYS),
                     "-n", str(ops), "-c", str(CONNS), "-v", str(value), "-q", "--csv"] + args
    if ca:
        argv += ["--tls-ca", ca]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit("kura-bench %s failed (%d): %s" % (" ".join(argv), p.returncode,
                                                            p.stderr.strip()[-300:]))
    return float(list(csv.DictReader(p.stdout.strip().splitlines()))[-1]["ops_per_sec"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ops", type=int, default=200000)
    ap.add_argument("--value", type=int, default=32)
    ap.add_argument("--servers", default="kurad,memcached",
                    help="memcached -Z beside kurad: its own ratio, for reference")
    a = ap.parse_args()
    if not shutil.which("openssl"):
        raise SystemExit("bench/tls.py needs the openssl command (Debian: openssl)")
    d = tempfile.mkdtemp(prefix="kura-bench-tls-")
    try:
        certs(d)
        print("%d connections, %d-byte values, %d requests a run, median of %d"
              % (CONNS, a.value, a.ops, a.reps))
        print("%-10s %-8s %14s %14s %7s" % ("server", "cell", "plain ops/s", "TLS ops/s",
                                           "ratio"))
        for server in a.servers.split(","):
            if server == "memcached" and not shutil.which("memcached"):
                print("memcached: not installed, skipped")
                continue
            proc, tls, plain = start(a.build, d, server)
            try:
                for name, args in CELLS:
                    p, t = [], []
                    for _ in range(a.reps):
                        p.append(bench(a.build, plain, args, a.ops, a.value))
                        t.append(bench(a.build, tls, args, a.ops, a.value,
                                       os.path.join(d, "ca.pem")))
                    mp, mt = statistics.median(p), statistics.median(t)
                    print("%-10s %-8s %14.0f %14.0f %6.2fx" % (server, name, mp, mt, mt / mp),
                          flush=True)
            finally:
                proc.terminate()
                proc.wait(30)
    finally:
        shutil.rmtree(d, True)


if __name__ == "__main__":
    main()
