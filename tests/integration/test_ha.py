#!/usr/bin/env python3
"""Automatic failover on etcd, Jepsen-style (issue 32, items 3 and 4).
# kura-test: once

The test starts etcd (Debian's etcd-server), three kurad (-ulog, -syncrepl 1,
-ha-etcd, -metrics, hash files) and HAProxy (`option httpchk GET /primary`,
as conf/haproxy.cfg) on the loopback, each on free ports in a temp dir of
its own, and polls with deadlines throughout.

  Faults      client threads write unique values (a key of their own per
              write, and a small pool of shared keys) through HAProxy while
              the test injects faults at random: kill -9 of the master
              (restarted once another leads), SIGSTOP of the master for
              longer than the TTL then SIGCONT, kill -9 and restart of
              etcd, a restart (SIGTERM, then its original command line) of
              any server.  After each, it waits for the next acknowledged
              write (the fault's time to recovery) and for the group to be
              whole again (a leader, two connected replicas).  Then a
              checker reads every key back from the leader: every
              acknowledged write present with its value (0 lost), and for
              each shared key, no acknowledged write that began after the
              surviving value's write was acknowledged (a write lost to a
              second master acknowledging in an overlapping term: split
              brain).  It prints the distribution of the times from each
              fault to the next acknowledged write, by kind.
              KURA_HA_FAULTS (default 4: one of each kind), KURA_HA_TTL
              (default 2 s); `make test-ha` runs 24 faults with a 5 s TTL.
  Checker     the checker itself on made-up histories: a lost write and a
              split-brain overwrite are found (the negative check of the
              fault test's verdicts), a clean history passes
  Fence       a leader paused (SIGSTOP) past its lease, its key gone and
              another name's put in etcd, refuses a write sent to it
              before it wakes (its fence closed); negative check with
              KURA_TEST_HA_NO_FENCE (a test build's switch: the fence has
              no deadline): the same write is taken
  EtcdAuth    etcd with authentication on: kurad logs in with
              -ha-etcd-auth and leads; with a wrong password (negative) it
              never leads, takes no write, and its log says why
  EtcdTls     etcd over https: kurad verifies its certificate with
              -ha-etcd-ca and leads; given another CA (negative) it never
              reaches etcd, takes no write, and its log says why
  Options     -ha-* refused at start with exit status 2 and one line: a
              bad URL, no -ulog, a name with a space, a CA file that does
              not load, -ha-ttl without -ha-etcd
  Switchover  `kuractl ha switchover NAME` moves the leader to NAME, which
              has every write; `kuractl ha status` names it, with three
              members; /primary and /replica say the roles

Skipped as a missing dependency without etcd (etcd-server) or haproxy.
"""
import os, random, re, shutil, signal, socket, statistics, subprocess, sys, tempfile
import atexit, threading, time, unittest, urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import poll_until, free_port

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
TTL = int(os.environ.get("KURA_HA_TTL", "2"))
FAULTS = int(os.environ.get("KURA_HA_FAULTS", "4"))
WAIT = 60 * kuratest.SCALE              # a deadline for a recovery, never a timing


def kuractl_path():
    return os.path.join(os.path.dirname(kuratest.kurad_path()), "kuractl")


def have_tools():
    if not os.access(ETCD, os.X_OK):
        return kuratest.missing("etcd (apt-get install etcd-server)")
    if not os.access(HAPROXY, os.X_OK):
        return kuratest.missing("haproxy (apt-get install haproxy)")
    if kuratest.is_memcached():
        return kuratest.not_applicable("kurad-only behaviour")
    return None


_procs = []


@atexit.register
def _kill_left():
    """Whatever a failed or interrupted test left running."""
    for p in _procs:
        p.kill9()


class Proc:
    """A process started, stopped and started again with the same command
    line, its output appended to a file."""

    def __init__(self, argv, log, cwd, env=None):
        self.argv, self.log, self.cwd, self.env = argv, log, cwd, env
        self.p = None
        _procs.append(self)

    def start(self):
        with open(self.log, "ab") as out:
            self.p = subprocess.Popen(self.argv, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                      stdout=out, stderr=out, start_new_session=True,
                                      env=self.env)
        return self

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            self.p.send_signal(sig)

    def kill9(self):
        if self.alive():
            self.p.send_signal(signal.SIGCONT)
            self.p.kill()
        if self.p:
            self.p.wait()

    def stop(self, timeout=20):
        if not self.alive():
            return
        self.p.send_signal(signal.SIGCONT)
        self.p.terminate()
        try:
            self.p.wait(timeout * kuratest.SCALE)
        except subprocess.TimeoutExpired:
            self.kill9()


def wall(t):
    """A time.monotonic() as the logs' wall clock, for reading them side by side."""
    w = time.time() - (time.monotonic() - t)
    return time.strftime("%H:%M:%S", time.gmtime(w)) + ".%03d" % (w % 1 * 1000)


def stopped(pid):
    """Whether the process is stopped (SIGSTOP), as /proc says."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def http_code(port, path, timeout=1.0):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, ValueError):
        return None


def mc(port, data, timeout=3.0):
    """One request on a new connection: the reply's bytes up to END/STORED/
    an error line, or None when the connection failed or timed out."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError:
        return None
    try:
        s.settimeout(timeout)
        s.sendall(data)
        buf = b""
        while not re.search(rb"(END|STORED|NOT_STORED|ERROR[^\r]*|SERVER_ERROR[^\r]*)\r\n$", buf):
            chunk = s.recv(65536)
            if not chunk:
                return buf or None
            buf += chunk
        return buf
    except OSError:
        return None
    finally:
        s.close()


def b64(text):
    import base64
    return base64.b64encode(text.encode()).decode()


def etcd_call(c, path, body):
    """One POST to the cluster's etcd (its JSON gateway): the reply's JSON."""
    import json
    req = urllib.request.Request(c.etcd_url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def parse_values(reply):
    out = {}
    for m in re.finditer(rb"VALUE (\S+) \d+ (\d+)\r\n", reply or b""):
        n = int(m.group(2))
        out[m.group(1).decode()] = reply[m.end():m.end() + n].decode()
    return out


class Cluster:
    """etcd, three kurad and HAProxy on the loopback."""

    def __init__(self, ttl, n=3, env=None, syncrepl=1, haproxy=True, auth=None, tls=None):
        self.nodes, self.front, self.etcd = [], None, None
        self.tls = tls                  # (certificate dir, the CA kurad is given)
        try:
            self.start(ttl, n, env, syncrepl, haproxy, auth)
        except BaseException:
            self.close()
            raise

    def start(self, ttl, n, env, syncrepl, haproxy, auth):
        self.tmp = tempfile.mkdtemp(prefix="kuratest-ha-")
        self.ttl = ttl
        self.cluster = "t%d" % os.getpid()
        cp, pp = free_port(), free_port()
        self.etcd_url = "%s://127.0.0.1:%d" % ("https" if self.tls else "http", cp)
        certs = ["--cert-file", os.path.join(self.tls[0], "srv.pem"),
                 "--key-file", os.path.join(self.tls[0], "srv.key")] if self.tls else []
        self.etcd = Proc([ETCD, "--name", "t", "--data-dir", os.path.join(self.tmp, "etcd"),
                          "--listen-client-urls", self.etcd_url,
                          "--advertise-client-urls", self.etcd_url,
                          "--listen-peer-urls", "http://127.0.0.1:%d" % pp,
                          "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pp,
                          "--initial-cluster", "t=http://127.0.0.1:%d" % pp] + certs,
                         os.path.join(self.tmp, "etcd.log"), self.tmp)
        self.etcd_client_port = cp
        self.etcd.start()
        self.wait_etcd()
        extra = []
        if auth:
            # etcd's root user, authentication on; kurad logs in as auth[1]
            ctl = [shutil.which("etcdctl") or "/usr/bin/etcdctl", "--endpoints", self.etcd_url]
            for a in (["user", "add", "root:" + auth[0]], ["auth", "enable"]):
                subprocess.run(ctl + a, check=True, capture_output=True, timeout=60)
            path = os.path.join(self.tmp, "etcd-auth")
            with open(path, "w") as f:
                f.write("root:%s\n" % auth[1])
            extra = ["-ha-etcd-auth", path]
        if self.tls:
            extra = ["-ha-etcd-ca", os.path.join(self.tls[0], self.tls[1])]
        user = ["-u", "root"] if os.geteuid() == 0 else []
        for i in range(1, n + 1):
            d = os.path.join(self.tmp, "k%d" % i)
            os.mkdir(d)
            for attempt in range(5):        # a port taken meanwhile by a parallel test
                port, mport = free_port(), free_port()
                argv = [kuratest.kurad_path(), "-host", "127.0.0.1", "-port", str(port), "-th",
                        "2", "-sid", str(i), "-ulog", os.path.join(d, "ulog"),
                        "-metrics", "127.0.0.1:%d" % mport,
                        "-ha-etcd", self.etcd_url, "-ha-cluster", self.cluster,
                        "-ha-ttl", str(ttl), "-log", os.path.join(d, "log")] + user + extra
                if syncrepl:
                    argv += ["-syncrepl", str(syncrepl), "-syncrepl-timeout", "2000"]
                argv.append(os.path.join(d, "data.kh"))
                node = Proc(argv, os.path.join(d, "stderr"), d,
                            env=dict(os.environ, **env) if env else None)
                node.port, node.mport, node.name = port, mport, "127.0.0.1:%d" % port
                node.start()
                poll_until(lambda: not node.alive() or http_code(mport, "/health"), WAIT,
                           interval=0.05, what="kurad %d serving /health" % i)
                if node.alive():
                    break
            self.nodes.append(node)
        if haproxy:
            self.front = free_port()
            cfg = os.path.join(self.tmp, "haproxy.cfg")
            with open(cfg, "w") as f:
                f.write("global\n    maxconn 256\n\ndefaults\n    mode tcp\n"
                        "    timeout connect 1s\n    timeout client 30s\n"
                        "    timeout server 30s\n\nlisten kura\n"
                        "    bind 127.0.0.1:%d\n    option httpchk GET /primary\n"
                        "    http-check expect status 200\n"
                        "    default-server inter 200ms fall 1 rise 1 "
                        "on-marked-down shutdown-sessions\n" % self.front)
                for k in self.nodes:
                    f.write("    server k%d 127.0.0.1:%d check port %d\n"
                            % (self.nodes.index(k) + 1, k.port, k.mport))
            self.haproxy = Proc([HAPROXY, "-db", "-f", cfg], os.path.join(self.tmp, "haproxy.log"),
                                self.tmp).start()
        if (not auth or auth[0] == auth[1]) and (not self.tls or self.tls[1] == "ca.pem"):
            self.wait_whole()

    def wait_etcd(self):
        if self.tls:
            import ssl
            ctx = ssl.create_default_context(cafile=os.path.join(self.tls[0], "ca.pem"))

            def up():
                try:
                    with urllib.request.urlopen(self.etcd_url + "/health", timeout=1,
                                                context=ctx) as r:
                        return r.status == 200
                except (OSError, ValueError):
                    return False
            poll_until(up, WAIT, interval=0.1, what="etcd answering /health over TLS")
            return
        poll_until(lambda: http_code(self.etcd_client_port, "/health") == 200, WAIT,
                   interval=0.1, what="etcd answering /health")

    def leader(self):
        """The node whose /primary is 200, if exactly one."""
        up = [k for k in self.nodes if k.alive() and http_code(k.mport, "/primary") == 200]
        return up[0] if len(up) == 1 else None

    def whole(self):
        lead = self.leader()
        if not lead:
            return False
        reps = [k for k in self.nodes if k is not lead and http_code(k.mport, "/replica") == 200]
        return lead if len(reps) == len(self.nodes) - 1 else False

    def wait_whole(self):
        return poll_until(self.whole, WAIT, interval=0.1,
                          what="a leader with every other server its connected replica")

    def close(self, remove=False):
        """Stops everything; removes the temp dir when remove (a test that
        passed: a failure's logs stay for a look).  A sanitizer's report in
        a kurad's stderr fails the test (and keeps the logs)."""
        for k in self.nodes:
            k.stop()
        for k in self.nodes:
            err = ""
            # its stderr, and its -log file (where kurad sends stderr once open)
            for path in (k.log, os.path.join(os.path.dirname(k.log), "log")):
                try:
                    with open(path, errors="replace") as f:
                        err += f.read()
                except OSError:
                    pass
            if kuratest.SANITIZER_RE.search(err):
                self.nodes = []
                raise AssertionError("sanitizer report from kurad %s:\n%s" % (k.name, err[-6000:]))
        if self.front:
            self.haproxy.stop()
        if self.etcd:
            self.etcd.stop()
        if remove:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def logs(self):
        out = []
        for k in self.nodes:
            try:
                with open(os.path.join(os.path.dirname(k.log), "log"), errors="replace") as f:
                    out.append("--- %s\n%s" % (k.name, f.read()[-4000:]))
            except OSError:
                pass
        return "\n".join(out)


class Writers:
    """Client threads writing through HAProxy: a unique key per write, and
    one of a few shared keys every third write, each value unique.
    Acknowledged writes are kept with the times their request was sent and
    their STORED came back."""

    def __init__(self, port, threads=3, shared=8):
        self.port, self.shared = port, shared
        self.acked = []                 # (key, value, t_sent, t_acked)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(threads)]
        for t in self.threads:
            t.start()

    def run(self, i):
        seq = 0
        s = None
        while not self.stop.is_set():
            seq += 1
            key = "s%d" % (seq % self.shared) if seq % 3 == 0 else "u%d-%d" % (i, seq)
            value = "v%d-%d-%d" % (i, seq, random.randrange(1 << 30))
            try:
                if s is None:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=3)
                t0 = time.monotonic()
                s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key.encode(), len(value), value.encode()))
                line = b""
                while not line.endswith(b"\r\n"):
                    c = s.recv(256)
                    if not c:
                        raise OSError("closed")
                    line += c
                if line == b"STORED\r\n":
                    with self.lock:
                        self.acked.append((key, value, t0, time.monotonic()))
                else:
                    self.stop.wait(0.05)    # refused (a replica, a fenced master)
            except OSError:
                if s:
                    s.close()
                s = None
                self.stop.wait(0.05)        # reconnect after a short pause
        if s:
            s.close()

    def count(self):
        with self.lock:
            return len(self.acked)

    def first_ack_after(self, t):
        """When the first write sent after t was acknowledged (a reply
        already on its way at t does not count)."""
        with self.lock:
            acks = [a[3] for a in self.acked if a[2] > t]
        return min(acks) if acks else None

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(30)
        return list(self.acked)


def check(acked, final):
    """The verdicts over a history: acked [(key, value, t_sent, t_acked)],
    final {key: value} as read back.  Returns (lost, split): the
    acknowledged unique writes missing or changed, and the shared keys whose
    surviving value was overwritten by an acknowledged write sent after it
    was acknowledged."""
    lost, split = [], []
    by_key = {}
    for key, value, t0, t1 in acked:
        by_key.setdefault(key, []).append((value, t0, t1))
    for key, writes in by_key.items():
        if not key.startswith("s"):
            for value, _, _ in writes:
                if final.get(key) != value:
                    lost.append((key, value, final.get(key)))
            continue
        got = final.get(key)
        mine = [w for w in writes if w[0] == got]
        if got is None or not mine:
            # the survivor is an unacknowledged write (allowed) unless an
            # acknowledged one is missing altogether: none survived
            if got is None:
                lost.append((key, writes[-1][0], None))
            continue
        survivor_acked = mine[0][2]
        later = [w for w in writes if w[1] > survivor_acked]
        if later:
            split.append((key, got, later[0][0]))
    return lost, split


@unittest.skipIf(have_tools(), have_tools())
class Checker(unittest.TestCase):
    def test_checker(self):
        clean = [("u1", "a", 0.0, 1.0), ("s1", "x", 0.0, 1.0), ("s1", "y", 2.0, 3.0)]
        self.assertEqual(check(clean, {"u1": "a", "s1": "y"}), ([], []))
        # negative checks: a lost unique write, an overwritten survivor
        lost, split = check(clean, {"s1": "y"})
        self.assertEqual(lost, [("u1", "a", None)])
        lost, split = check(clean, {"u1": "a", "s1": "x"})
        self.assertEqual(split, [("s1", "x", "y")])
        # concurrent writes may end either way
        conc = [("s2", "p", 0.0, 2.0), ("s2", "q", 1.0, 3.0)]
        self.assertEqual(check(conc, {"s2": "p"}), ([], []))
        self.assertEqual(check(conc, {"s2": "q"}), ([], []))


@unittest.skipIf(kuratest.is_memcached(), kuratest.not_applicable("kurad-only behaviour"))
class Options(unittest.TestCase):
    """-ha-* refused at start, exit status 2 and one line naming it: a bad
    URL, no -ulog, a name with a space, a CA file that does not load, an
    option without -ha-etcd."""

    def test_refused(self):
        d = tempfile.mkdtemp(prefix="kuratest-ha-opt-")
        ulog = ["-ulog", os.path.join(d, "ulog")]
        cases = [(ulog + ["-ha-etcd", "ftp://x"], "bad etcd endpoint"),
                 (["-ha-etcd", "http://127.0.0.1:1"], "needs '-ulog'"),
                 (ulog + ["-ha-etcd", "http://127.0.0.1:1", "-ha-name", "a b"], "-ha-name"),
                 (ulog + ["-ha-etcd", "https://127.0.0.1:1", "-ha-etcd-ca", "/nonexistent"],
                  "/nonexistent"),
                 (["-ha-ttl", "5"], "needs '-ha-etcd'")]
        try:
            for args, words in cases:
                p = subprocess.run([kuratest.kurad_path(), "-port", str(free_port())] + args,
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 2, (args, p.stderr))
                self.assertIn(words, p.stderr)
                self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
        finally:
            shutil.rmtree(d, ignore_errors=True)


@unittest.skipIf(have_tools(), have_tools())
class Faults(unittest.TestCase):
    def test_faults(self):
        c = Cluster(TTL)
        ok = False
        try:
            self.run_faults(c)
            ok = not os.environ.get("KURA_HA_KEEP")
        except Exception:
            print("# " + c.logs().replace("\n", "\n# "))
            raise
        finally:
            c.close(remove=ok)

    def wait_acks(self, w, n, what):
        base = w.count()
        poll_until(lambda: w.count() >= base + n, WAIT, interval=0.05, what=what)

    def run_faults(self, c):
        rnd = random.Random(os.environ.get("KURA_HA_SEED", str(os.getpid())))
        w = Writers(c.front)
        self.wait_acks(w, 30, "writes acknowledged through HAProxy")
        kinds = os.environ.get("KURA_HA_KINDS", "kill9,sigstop,etcd,restart").split(",")
        times = {k: [] for k in kinds}
        plan = kinds[:] if FAULTS <= len(kinds) else []
        while len(plan) < FAULTS:
            plan.append(rnd.choice(kinds))
        if FAULTS > len(kinds):
            rnd.shuffle(plan)
        for n, kind in enumerate(plan[:FAULTS], 1):
            lead = c.wait_whole()
            # the clock starts once the fault is in place: a write sent
            # before it may still be acknowledged
            if kind == "kill9":
                lead.kill9()
            elif kind == "sigstop":
                lead.signal(signal.SIGSTOP)
                poll_until(lambda: stopped(lead.p.pid), WAIT, interval=0.001,
                           what="the master stopped")
            elif kind == "etcd":
                c.etcd.kill9()
            else:
                victim = rnd.choice(c.nodes)
                victim.stop()
            t = time.monotonic()
            if kind == "etcd":
                c.etcd.start()
            elif kind == "restart":
                victim.start()
            if kind == "sigstop":
                # paused past the lease: resumed only once etcd lets it go
                poll_until(lambda: time.monotonic() > t + c.ttl + 1 and
                           w.first_ack_after(t) is not None, WAIT, interval=0.05,
                           what="a write acknowledged by another master")
                lead.signal(signal.SIGCONT)
            first = poll_until(lambda: w.first_ack_after(t), WAIT, interval=0.05,
                               what="the next acknowledged write after %s" % kind)
            times[kind].append(first - t)
            print("# fault %d %s at %s: next acknowledged write after %.2f s"
                  % (n, kind, wall(t), first - t), flush=True)
            if kind == "kill9":
                lead.start()            # its original command line
            elif kind == "etcd":
                c.wait_etcd()           # the group is whole with etcd answering
            self.wait_acks(w, 10, "writes after fault %d" % n)
        c.wait_whole()
        self.wait_acks(w, 10, "writes at the end")
        acked = w.finish()
        lead = c.wait_whole()
        keys = sorted({a[0] for a in acked})
        final = {}
        for i in range(0, len(keys), 100):
            r = mc(lead.port, b"get " + " ".join(keys[i:i + 100]).encode() + b"\r\n", 10)
            self.assertIsNotNone(r, "reading back from the leader")
            final.update(parse_values(r))
        lost, split = check(acked, final)
        alltimes = sorted(x for v in times.values() for x in v)
        print("# %d faults, %d acknowledged writes, %d lost, %d split-brain" %
              (len(alltimes), len(acked), len(lost), len(split)))
        print("# time to the next acknowledged write (TTL %d s): min %.2f median %.2f "
              "p90 %.2f max %.2f" % (c.ttl, alltimes[0], statistics.median(alltimes),
                                     alltimes[int(0.9 * (len(alltimes) - 1))], alltimes[-1]))
        for k in kinds:
            if times[k]:
                print("#   %-8s n=%d median %.2f max %.2f" % (k, len(times[k]),
                                                              statistics.median(times[k]),
                                                              max(times[k])))
        self.assertEqual(lost[:10], [], "acknowledged writes lost")
        self.assertEqual(split[:10], [], "acknowledged writes overwritten by an older term's")
        self.assertGreaterEqual(len(alltimes), FAULTS)


@unittest.skipIf(have_tools(), have_tools())
class Fence(unittest.TestCase):
    def paused_write(self, env):
        """One server without -syncrepl, leading; paused past its lease
        until etcd has dropped its key and another name holds it (put here,
        under a lease of the test's: no server of it probes the paused one,
        so only the fence stands between it and the write), and etcd paused
        too; a set sent to it while paused: its reply once it wakes."""
        c = Cluster(TTL, n=1, env=env, syncrepl=0, haproxy=False)
        try:
            lead = c.wait_whole()
            self.assertEqual(mc(lead.port, b"set f 0 0 1\r\na\r\n"), b"STORED\r\n")
            lead.signal(signal.SIGSTOP)
            key = "/kura/%s/leader" % c.cluster
            poll_until(lambda: not etcd_call(c, "/v3/kv/range", {"key": b64(key)}).get("kvs"),
                       WAIT, interval=0.1, what="the paused leader's key gone with its lease")
            lease = etcd_call(c, "/v3/lease/grant", {"TTL": 60})["ID"]
            etcd_call(c, "/v3/kv/put", {"key": b64(key), "value": b64("other 127.0.0.1:1 99"),
                                        "lease": lease})
            # etcd paused too: the woken leader's thread cannot learn from
            # it that it leads no more, so only the fence answers the write
            c.etcd.signal(signal.SIGSTOP)
            s = socket.create_connection(("127.0.0.1", lead.port), timeout=10)
            s.sendall(b"set f 0 0 1\r\nb\r\n")
            lead.signal(signal.SIGCONT)
            s.settimeout(10 * kuratest.SCALE)
            reply = s.recv(256)
            s.close()
            c.etcd.signal(signal.SIGCONT)
            c.close(remove=True)
            return reply
        finally:
            c.close()

    def test_fence(self):
        reply = self.paused_write(None)
        self.assertTrue(reply.startswith(b"SERVER_ERROR"), reply)

    def test_no_fence_negative(self):
        reply = self.paused_write({"KURA_TEST_HA_NO_FENCE": "1"})
        self.assertEqual(reply, b"STORED\r\n")


def alone(case, words, **etcd):
    """One kurad on an etcd set up by etcd (auth=, tls=): with words None it
    leads and takes a write; else it never leads, its log says words, and
    it takes no write."""
    c = Cluster(TTL, n=1, syncrepl=0, haproxy=False, **etcd)
    try:
        k = c.nodes[0]
        if words is None:
            c.wait_whole()
            case.assertEqual(mc(k.port, b"set a 0 0 1\r\nx\r\n"), b"STORED\r\n")
        else:
            log = os.path.join(os.path.dirname(k.log), "log")
            poll_until(lambda: os.path.exists(log) and words in open(log).read(), WAIT,
                       interval=0.1, what="'%s' in the log" % words)
            case.assertEqual(http_code(k.mport, "/primary"), 503)
            case.assertTrue(mc(k.port, b"set a 0 0 1\r\nx\r\n").startswith(b"SERVER_ERROR"))
        c.close(remove=True)
    finally:
        c.close()


def etcdctl_missing():
    """EtcdAuth sets etcd's users up with etcdctl (Debian's etcd-client)."""
    return have_tools() or (None if shutil.which("etcdctl")
                            else kuratest.missing("etcdctl (apt-get install etcd-client)"))


@unittest.skipIf(etcdctl_missing(), etcdctl_missing())
class EtcdAuth(unittest.TestCase):
    """etcd with authentication on: kurad logs in (-ha-etcd-auth) and
    leads; with a wrong password (negative) it never does, and says why."""

    def test_password(self):
        alone(self, None, auth=("s3cret", "s3cret"))

    def test_wrong_password(self):
        alone(self, "authentication failed", auth=("s3cret", "wrong"))


def tls_missing():
    return have_tools() or (None if shutil.which("openssl")
                            else kuratest.missing("the openssl command (Debian: openssl)"))


@unittest.skipIf(tls_missing(), tls_missing())
class EtcdTls(unittest.TestCase):
    """etcd over https: kurad verifies its certificate against -ha-etcd-ca
    and leads; given another CA (negative), it never reaches etcd, says why
    and takes no write."""

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from test_tls import make_certs
        cls.certs = tempfile.mkdtemp(prefix="kuratest-ha-certs-")
        make_certs(cls.certs)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.certs, ignore_errors=True)

    def test_https(self):
        alone(self, None, tls=(self.certs, "ca.pem"))

    def test_other_ca(self):
        alone(self, "TLS", tls=(self.certs, "rogue.pem"))


@unittest.skipIf(have_tools(), have_tools())
class Switchover(unittest.TestCase):
    def test_switchover(self):
        c = Cluster(TTL, haproxy=False)
        try:
            lead = c.wait_whole()
            for i in range(20):
                self.assertEqual(mc(lead.port, b"set k%d 0 0 1\r\nx\r\n" % i), b"STORED\r\n")
            target = [k for k in c.nodes if k is not lead][0]
            etcd = ["--etcd", c.etcd_url, "--cluster", c.cluster]
            r = subprocess.run([kuractl_path(), "ha", "switchover", target.name, "--wait", "60"]
                               + etcd, capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("%s leads" % target.name, r.stdout)
            poll_until(lambda: http_code(target.mport, "/primary") == 200, WAIT, interval=0.1,
                       what="/primary on the new leader")
            self.assertEqual(http_code(lead.mport, "/primary"), 503)
            got = parse_values(mc(target.port, b"get " + b" ".join(b"k%d" % i for i in range(20))
                                  + b"\r\n"))
            self.assertEqual(len(got), 20)
            self.assertEqual(mc(target.port, b"set n 0 0 1\r\ny\r\n"), b"STORED\r\n")
            poll_until(lambda: http_code(lead.mport, "/replica") == 200, WAIT, interval=0.1,
                       what="the former leader a replica of the new one")
            r = subprocess.run([kuractl_path(), "ha", "status"] + etcd, capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("leader: %s at %s" % (target.name, target.name), r.stdout)
            self.assertEqual(r.stdout.count("\nmember "), 3, r.stdout)
            r = subprocess.run([kuractl_path(), "ha", "switchover", "nobody"] + etcd,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 4, r.stderr)
            c.close(remove=True)
        finally:
            c.close()


if __name__ == "__main__":
    kuratest.main()
