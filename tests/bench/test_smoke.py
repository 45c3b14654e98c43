#!/usr/bin/python3
"""Smoke test of the benchmark harness: kura-bench must stay correct.

Starts a server on a free port (kurad from $KURA_BUILD if it exists, else
Debian's memcached), runs kura-bench for about two seconds with --verify,
pipelining, multi-get, a value-size range and several threads, and asserts no
errors and no mismatches -- never a speed.  Then, through a small proxy,
checks that replies cut into tiny pieces still verify, that a corrupted value
is caught (exit 3) and that a garbled reply is a protocol error (exit 1).

Prints TAP lines; exits non-zero on any failure.
"""
import os, random, re, shutil, socket, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kuratest import free_port, SCALE  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("KURA_BUILD", os.path.join(ROOT, "build-test"))
BENCH = os.path.join(BUILD, "kura-bench")
KURAD = os.path.join(BUILD, "kurad")

n_test = 0
failed = 0


def tap(ok, name, diag=""):
    global n_test, failed
    n_test += 1
    if not ok:
        failed += 1
    print("%s %d - %s" % ("ok" if ok else "not ok", n_test, name), flush=True)
    if diag and not ok:
        for line in diag.rstrip().splitlines()[-30:]:
            print("#   " + line)




def wait_port(port, proc, deadline_s=10.0):
    end = time.monotonic() + deadline_s * SCALE     # stretched for sanitizer builds
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


def start_server(tmp):
    """Returns (proc, port, name) or raises."""
    candidates = []
    if os.access(KURAD, os.X_OK):
        if os.geteuid() == 0:               # as root, kurad runs as nobody (-u)
            candidates.append(("kurad", lambda p: [KURAD, "-port", str(p), "-th", "2",
                                                   "-u", "nobody", "*"]))
        candidates.append(("kurad", lambda p: [KURAD, "-port", str(p), "-th", "2", "*"]))
    mc = shutil.which("memcached") or "/usr/bin/memcached"
    if not candidates and os.access(mc, os.X_OK):   # a kurad that exists must start
        cmd = [mc, "-p", "%d", "-U", "0", "-l", "127.0.0.1", "-t", "2", "-m", "64"]
        if os.geteuid() == 0:
            cmd += ["-u", "nobody"]
        candidates.append(("memcached", lambda p, cmd=cmd: [c.replace("%d", str(p)) for c in cmd]))
    errors = []
    for name, mk in candidates:
        for _ in range(3):                     # a port may be taken between probe and bind
            port = free_port()
            log = open(os.path.join(tmp, name + ".log"), "wb")
            proc = subprocess.Popen(mk(port), stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
            if wait_port(port, proc):
                return proc, port, name
            stop(proc)
            log.close()
            tail = open(os.path.join(tmp, name + ".log"), "rb").read()[-400:]
            errors.append("%s on port %d did not come up: %s" % (
                " ".join(mk(port)), port, tail.decode("utf-8", "replace").strip()))
            if proc.returncode not in (None, 0) and b"in use" not in tail:
                break                           # it refused this command line: next one
    raise RuntimeError("\n".join(errors) or "no server (neither kurad nor memcached) found")


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5 * SCALE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_bench(args, timeout=60):
    p = subprocess.run([BENCH, "--quiet"] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout * SCALE)
    out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    res = {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            for kv in line.split()[1:]:
                k, _, v = kv.partition("=")
                res[k] = v
    return p.returncode, res, out + err


class Proxy:
    """Relays client<->server; replies go back in random tiny pieces, optionally
    passed through mangle(bytes) -> bytes first."""

    def __init__(self, upstream_port, mangle=None, max_chunk=7):
        self.up = upstream_port
        self.mangle = mangle
        self.max_chunk = max_chunk
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while not self.stopped:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.up))
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self.pump, args=(c, u, False), daemon=True).start()
            threading.Thread(target=self.pump, args=(u, c, True), daemon=True).start()

    def pump(self, src, dst, replies):
        rnd = random.Random(7)
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if replies and self.mangle:
                    data = self.mangle(data)
                if replies:
                    i = 0
                    while i < len(data):
                        n = rnd.randint(1, self.max_chunk)
                        dst.sendall(data[i:i + n])
                        i += n
                else:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.stopped = True
        self.ls.close()


def main():
    if not os.access(BENCH, os.X_OK):
        print("1..1")
        tap(False, "kura-bench is built at %s" % BENCH)
        return 1
    print("1..7")
    tmp = tempfile.mkdtemp(prefix="kura-bench-smoke-")
    proc = None
    try:
        try:
            proc, port, name = start_server(tmp)
            tap(True, "server %s listening on port %d" % (name, port))
        except Exception as e:               # noqa: BLE001 - report any start failure
            tap(False, "server starts", str(e))
            return 1
        base = ["-p", str(port), "--verify"]

        # 1. the main smoke run: ~2 s, pipelined, multi-get, sizes across the
        #    16-byte header boundary and into several packets, misses, deletes
        rc, res, out = run_bench(base + [
            "--threads", "2", "--conns", "4", "--pipeline", "16", "--multiget", "5",
            "--duration", "2", "--keys", "5000", "--value-size", "1-9000",
            "--ratio", "3:7:1", "--miss-ratio", "0.1", "--pattern", "zipf:0.9",
            "--prefill", "--key-prefix", "smoke:a:"])
        ok = (rc == 0 and res.get("status") == "ok" and res.get("errors") == "0"
              and res.get("mismatches") == "0" and int(res.get("ops", 0)) > 0
              and int(res.get("hits", 0)) > 0 and int(res.get("misses", 0)) > 0)
        tap(ok, "pipelined multi-get run with --verify: no errors, no mismatches "
                "(%s ops, %s hits)" % (res.get("ops"), res.get("hits")), out)

        # 2. noreply sets, then every key read back in order and verified
        rc1, res1, out1 = run_bench(base + [
            "--conns", "2", "--pipeline", "8", "--ratio", "1:0", "--noreply",
            "--pattern", "seq", "--keys", "3000", "--ops", "3000", "--value-size", "100-2000",
            "--key-prefix", "smoke:b:"])
        rc2, res2, out2 = run_bench(base + [
            "--pipeline", "8", "--multiget", "10", "--ratio", "0:1", "--pattern", "seq",
            "--keys", "3000", "--ops", "300", "--key-prefix", "smoke:b:"])
        tap(rc1 == 0 and rc2 == 0 and res2.get("hits") == "3000" and res2.get("misses") == "0"
            and res2.get("mismatches") == "0",
            "noreply sets are all stored and read back intact", out1 + out2)

        # 3. replies cut into 1..7-byte pieces still parse and verify
        px = Proxy(port)
        try:
            rc, res, out = run_bench([
                "-p", str(px.port), "--verify", "--conns", "2", "--pipeline", "8",
                "--multiget", "4", "--ops", "2000", "--keys", "300", "--value-size", "1-3000",
                "--ratio", "1:2", "--prefill", "--key-prefix", "smoke:c:"])
        finally:
            px.close()
        tap(rc == 0 and res.get("mismatches") == "0" and res.get("errors") == "0"
            and int(res.get("hits", 0)) > 0,
            "replies split into tiny reads parse correctly", out)

        # 4. a corrupted value is a mismatch (exit 3)
        def corrupt(data):
            # flip one pattern byte inside each value block; lengths stay right
            return re.sub(rb"(VALUE \S+ \d+ \d+\r\n.{20})([a-z])",
                          lambda m: m.group(1) + (b"A" if m.group(2) != b"A" else b"B"),
                          data, flags=re.S)
        px = Proxy(port, mangle=corrupt, max_chunk=65536)
        try:
            rc, res, out = run_bench([
                "-p", str(px.port), "--verify", "--ops", "200", "--keys", "50",
                "--value-size", "200", "--ratio", "0:1", "--key-prefix", "smoke:d:",
                "--prefill"])
        finally:
            px.close()
        tap(rc == 3 and int(res.get("mismatches", 0)) > 0,
            "a corrupted value is counted as a mismatch and exits 3 (rc=%d)" % rc, out)

        # 5. a garbled reply is a protocol error (exit 1)
        px = Proxy(port, mangle=lambda d: d.replace(b"STORED\r\n", b"STORXD\r\n"), max_chunk=65536)
        try:
            rc, res, out = run_bench([
                "-p", str(px.port), "--ops", "50", "--ratio", "1:0", "--key-prefix", "smoke:e:",
                "--timeout", "5"])
        finally:
            px.close()
        tap(rc == 1 and "protocol error" in out, "a garbled reply exits 1 (rc=%d)" % rc, out)

        # 6. machine-readable forms parse
        rc, _, out = run_bench(base + ["--ops", "100", "--json", "--key-prefix", "smoke:f:"])
        import json
        try:
            j = json.loads(out.strip().splitlines()[-1])
            ok = rc == 0 and j["status"] == "ok" and j["ops"] == 100
        except Exception:                     # noqa: BLE001
            ok = False
        tap(ok, "--json prints one JSON object", out)
    finally:
        if proc:
            stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
