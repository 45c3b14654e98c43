#!/usr/bin/python3
# kura-test: once
"""test_metrics.py - the Prometheus endpoint (-metrics [HOST:]PORT): /metrics
and /health, scraped over real HTTP.

  Scrape      /metrics is Prometheus' text format (promtool check metrics
              passes, Debian's prometheus package; a missing-dependency skip
              without it), with memcached_exporter's names for memcached's
              figures and values equal to what "stats" says at the same
              moment (the exposition is built from the same lines).
  Families    kura_ families for the store (size, dead bytes, syncs), the
              fsync latency histogram (+Inf bucket = count, cumulative), the
              update log, the replication role, the snapshots.
  Health      200 "ok" while writes are taken; 503 naming the cause once a
              sync failed (tests/shim/failsync.c) or a change was refused for
              a full disk (RLIMIT_FSIZE); the same server before the fault
              answers 200 (the negative check).
  Bounds      at most 16 connections: a 17th, while 16 idle ones are open,
              is served at once and the oldest idle one closed (never more
              than 16 accepted); 16 clients trickling their headers a byte
              every 2 s leave /health answering, and one trickling without
              pause is closed at the 10 s whole-request deadline; a request
              other than GET or HEAD, headers past 8 KB, a body, an unknown
              path get an HTTP error, and the server goes on serving.
  Options     a bad -metrics value ("[::1", "::1", "[::1]", a port out of
              range) exits 2 with one line; a taken port stops kurad at
              start with a message.
"""
import http.client, os, resource, shutil, socket, subprocess, sys, tempfile, threading, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase, Server, poll_until, kura_only, stats, free_port

MB = 1 << 20

# memcached_exporter's names (prometheus/memcached_exporter, pkg/exporter/
# exporter.go) for figures memcached and kura both have
EXPORTER_NAMES = [
    "memcached_up", "memcached_version", "memcached_uptime_seconds", "memcached_time_seconds",
    "memcached_process_user_cpu_seconds_total", "memcached_process_system_cpu_seconds_total",
    "memcached_read_bytes_total", "memcached_written_bytes_total",
    "memcached_current_connections", "memcached_max_connections", "memcached_connections_total",
    "memcached_connections_rejected_total", "memcached_connections_yielded_total",
    "memcached_connections_listener_disabled_total", "memcached_current_bytes",
    "memcached_limit_bytes", "memcached_commands_total", "memcached_current_items",
    "memcached_items_total", "memcached_items_evicted_total", "memcached_items_reclaimed_total",
    "memcached_item_too_large_total", "memcached_item_no_memory_total",
    "memcached_malloced_bytes", "memcached_accepting_connections",
]


def http_get(port, path, method="GET", headers=None, timeout=5):
    """(status, body) of one request on a connection of its own."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout * kuratest.SCALE)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def parse(text):
    """{(name, frozenset(labels)): value} of an exposition's samples, and
    {name: type} of its TYPE lines."""
    samples, types = {}, {}
    for ln in text.splitlines():
        if ln.startswith("# TYPE "):
            _, _, name, typ = ln.split(" ", 3)
            types[name] = typ
            continue
        if not ln or ln.startswith("#"):
            continue
        head, value = ln.rsplit(" ", 1)
        labels = frozenset()
        name = head
        if "{" in head:
            name, rest = head.split("{", 1)
            labels = frozenset(tuple(p.split("=", 1)) for p in rest.rstrip("}").split("\",")
                               if p)
            labels = frozenset((k, v.strip('"')) for k, v in labels)
        samples[(name, labels)] = float(value)
    return samples, types


def value(samples, name, **labels):
    return samples[(name, frozenset(labels.items()))]


class Metrics(ServerTestCase):

    def start_metrics(self, db="%t/data.kh", extra=(), **kw):
        if kuratest.is_memcached():
            self.skipTest(kuratest.not_applicable("kura's own endpoint"))
        self.mport = free_port()
        s = Server(db=db, kura_args=["-metrics", "127.0.0.1:%d" % self.mport] + list(extra), **kw)
        self.addCleanup(s.stop)
        poll_until(lambda: self.try_get("/health"), what="the metrics endpoint")
        return s

    def try_get(self, path):
        try:
            return http_get(self.mport, path)
        except OSError:
            return None

    @kura_only
    def test_scrape_matches_stats_and_passes_promtool(self):
        s = self.start_metrics(extra=["-ulog", "ulog", "-bgs", "snaps"])
        with s.conn() as c:
            for i in range(20):
                self.assertEqual(c.request(b"set k%d 0 0 2\r\nab\r\n" % i), b"STORED\r\n")
            c.request(b"get k1 k2 nope\r\n")
            c.request(b"delete k3\r\n")
            c.request(b"delete nope\r\n")
            c.request(b"gets k4\r\n")
            self.assertEqual(c.request(b"cas k4 0 0 1 1\r\nx\r\n"), b"EXISTS\r\n")
            self.assertEqual(c.request(b"incr nope 1\r\n"), b"NOT_FOUND\r\n")
            c.send(b"lru_crawler metadump all\r\n")
            c.recv_until(b"END\r\n")
            c.send(b"digest\r\n")
            c.recv_until(b"END\r\n")
            status, body = http_get(self.mport, "/metrics")
            st = stats(c)
        self.assertEqual(status, 200)
        samples, types = parse(body)
        for name in EXPORTER_NAMES:
            self.assertIn(name, types, "memcached_exporter's %s" % name)
        # the same figures "stats" shows (no request in between changes them)
        self.assertEqual(value(samples, "memcached_current_items"), int(st["curr_items"]))
        self.assertEqual(value(samples, "memcached_items_total"), int(st["total_items"]))
        self.assertEqual(value(samples, "memcached_commands_total", command="get", status="hit"),
                         int(st["get_hits"]))
        self.assertEqual(value(samples, "memcached_commands_total", command="get", status="miss"),
                         int(st["get_misses"]))
        self.assertEqual(value(samples, "memcached_commands_total", command="delete",
                               status="hit"), 1)
        self.assertEqual(value(samples, "memcached_commands_total", command="cas",
                               status="badval"), 1)
        # set as the exporter derives it: cmd_set less the cas commands
        self.assertEqual(value(samples, "memcached_commands_total", command="set", status="hit"),
                         int(st["cmd_set"]) - 1)
        self.assertEqual(value(samples, "memcached_commands_total", command="incr",
                               status="miss"), 1)
        self.assertEqual(value(samples, "memcached_version", version="1.6.18"), 1)
        self.assertEqual(value(samples, "memcached_up"), 1)
        # kura's own: the store, the update log, snapshots, the fsync histogram
        self.assertEqual(value(samples, "kura_store_file_bytes", backend="hash"),
                         int(st["hash_file_bytes"]))
        self.assertEqual(value(samples, "kura_store_dead_bytes", backend="hash"),
                         int(st["hash_dead_bytes"]))
        self.assertEqual(value(samples, "kura_store_writes_stopped", backend="hash"), 0)
        self.assertEqual(value(samples, "kura_ulog_sync_failed"), 0)
        self.assertGreater(value(samples, "kura_ulog_bytes"), 0)
        self.assertEqual(value(samples, "kura_repl_role", role="master"), 1)
        self.assertIn("kura_snapshots_total", types)
        self.assertEqual(value(samples, "kura_listing_runs_total"), 1)
        self.assertEqual(value(samples, "kura_digest_runs_total"), 1)
        self.assertEqual(types["kura_fsync_duration_seconds"], "histogram")
        count = value(samples, "kura_fsync_duration_seconds_count")
        self.assertGreater(count, 0, "the store synced at start")
        self.assertEqual(value(samples, "kura_fsync_duration_seconds_bucket", le="+Inf"), count)
        buckets = sorted((float(dict(l)["le"]), v) for (n, l), v in samples.items()
                         if n == "kura_fsync_duration_seconds_bucket" and dict(l)["le"] != "+Inf")
        self.assertEqual([v for _, v in buckets], sorted(v for _, v in buckets), "cumulative")
        # Prometheus' own linter
        if not shutil.which("promtool"):
            self.skipTest(kuratest.missing("promtool (Debian package prometheus)"))
        p = subprocess.run(["promtool", "check", "metrics"], input=body.encode(),
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, (p.stdout + p.stderr).decode())

    @kura_only
    def test_promtool_rejects_a_broken_exposition(self):
        """The negative of the check above: promtool fails a counter without
        _total and a histogram without +Inf, so its pass means something."""
        if not shutil.which("promtool"):
            self.skipTest(kuratest.missing("promtool (Debian package prometheus)"))
        s = self.start_metrics()
        body = http_get(self.mport, "/metrics")[1]
        broken = body.replace("memcached_items_total", "memcached_items_stored")
        p = subprocess.run(["promtool", "check", "metrics"], input=broken.encode(),
                           capture_output=True, timeout=60)
        self.assertNotEqual(p.returncode, 0, "promtool accepted a counter without _total")
        s.stop()

    @kura_only
    def test_health_503_when_fenced(self):
        """A master fenced by a newer term takes no writes: /health says so
        (before the fix: 200 ok, and a readiness check kept sending it
        writes); a promote takes them again, healthy."""
        s = self.start_metrics(extra=["-ulog", "ulog"])
        self.assertEqual(http_get(self.mport, "/health"), (200, "ok\n"))    # negative
        with s.conn() as c:
            r = c.request(b"repl term 3 127.0.0.1 %d\r\n" % s.port)
            self.assertTrue(r.startswith(b"FENCED 3"), r)
            self.assertTrue(c.request(b"set a 0 0 1\r\nx\r\n").startswith(b"SERVER_ERROR"))
        status, body = http_get(self.mport, "/health")
        self.assertEqual(status, 503)
        self.assertIn("fenced", body)
        with s.conn() as c:
            self.assertTrue(c.request(b"repl promote\r\n").startswith(b"PROMOTED "))
        self.assertEqual(http_get(self.mport, "/health"), (200, "ok\n"))

    @kura_only
    def test_health_503_after_a_failed_sync(self):
        shim = os.path.join(os.environ.get("KURA_BUILD", "build-test"), "tests", "libfailsync.so")
        if not os.path.exists(shim):
            self.skipTest(kuratest.missing("%s (make builds it)" % shim))
        d = tempfile.mkdtemp(prefix="kuratest-metrics-")
        self.addCleanup(shutil.rmtree, d, True)
        trigger = os.path.join(d, "fail-now")
        env = {"LD_PRELOAD": os.path.abspath(shim), "KURA_FAILSYNC_TRIGGER": trigger,
               "KURA_FAILSYNC_LOG": os.path.join(d, "failed-calls"),
               "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}
        self.mport = free_port()
        s = Server(db=os.path.join(d, "data.kh"), start=False,
                   kura_args=["-sync", "always", "-metrics", "127.0.0.1:%d" % self.mport])
        s.env = dict(os.environ, **env)
        s.start()
        self.addCleanup(s.stop, check=False)
        poll_until(lambda: self.try_get("/health"), what="the metrics endpoint")
        with s.conn() as c:
            self.assertEqual(c.request(b"set a 0 0 1\r\nx\r\n"), b"STORED\r\n")
        # negative: the same server, writes taken, is healthy
        self.assertEqual(http_get(self.mport, "/health"), (200, "ok\n"))
        open(trigger, "w").close()
        with s.conn() as c:
            c.send(b"set b 0 0 1\r\nx\r\n")
            c.read_to_close()
        status, body = http_get(self.mport, "/health")
        self.assertEqual(status, 503)
        self.assertIn("takes no more writes", body)
        self.assertIn("hash_writes_stopped", body)
        samples, _ = parse(http_get(self.mport, "/metrics")[1])
        self.assertEqual(value(samples, "kura_store_writes_stopped", backend="hash"), 1)
        self.assertGreaterEqual(value(samples, "kura_store_sync_failures_total", backend="hash"), 1)
        s.stop(status=1)

    @kura_only
    def test_health_503_on_a_full_disk(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        limit = 4 * MB
        if hard != resource.RLIM_INFINITY and hard < limit:
            self.skipTest(kuratest.not_applicable("hard RLIMIT_FSIZE below 4 MB"))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        try:
            s = self.start_metrics(db="%t/data.kh#segsiz=1m", item_max="16m")
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        with s.conn(timeout=20) as c:
            self.assertEqual(c.request(b"set small 0 0 2\r\nok\r\n"), b"STORED\r\n")
            # negative: writes taken, healthy
            self.assertEqual(http_get(self.mport, "/health"), (200, "ok\n"))
            huge = b"h" * (6 * MB)
            r = c.request(b"set huge 0 0 %d\r\n%s\r\n" % (len(huge), huge))
            self.assertEqual(r, b"SERVER_ERROR no space left on device\r\n")
            status, body = http_get(self.mport, "/health")
            self.assertEqual(status, 503, body)
            self.assertIn("disk full", body)
            self.assertGreater(int(stats(c)["kura_disk_full_time"]), 0)

    @kura_only
    def test_connection_cap(self):
        s = self.start_metrics()
        idle = [socket.create_connection(("127.0.0.1", self.mport)) for _ in range(16)]
        try:
            # the 16 are accepted (each has a bufferevent): seen from the
            # server as 16 established sockets on the port
            poll_until(lambda: kuratest.accepted_sockets(s.proc.pid, self.mport) >= 16, what="16 accepted")
            # a 17th is served at once: the oldest of the 16, which has sent
            # no request, makes room for it, and the cap still holds
            self.assertEqual(http_get(self.mport, "/health", timeout=3), (200, "ok\n"))
            idle[0].settimeout(5 * kuratest.SCALE)
            self.assertEqual(idle[0].recv(100), b"", "the oldest idle connection closed")
            self.assertLessEqual(kuratest.accepted_sockets(s.proc.pid, self.mport), 16)
            for _ in range(20):         # more than the cap, one after the other
                self.assertEqual(http_get(self.mport, "/health", timeout=3), (200, "ok\n"))
                self.assertLessEqual(kuratest.accepted_sockets(s.proc.pid, self.mport), 16)
        finally:
            for i in idle:
                i.close()
        poll_until(lambda: self.try_get("/health") == (200, "ok\n"), what="served again")

    @kura_only
    def test_slow_clients(self):
        """16 clients sending their headers a byte every 2 s (and coming back
        when closed) hold no slot /health needs, and one trickling bytes is
        closed at the whole-request deadline although it never goes idle."""
        s = self.start_metrics()
        stop = threading.Event()
        closed = []

        def slow():
            req = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"x" * 100
            while not stop.is_set():
                c = socket.create_connection(("127.0.0.1", self.mport))
                try:
                    for b in req:
                        c.sendall(bytes([b]))
                        if stop.wait(2):
                            break
                except OSError:
                    closed.append(1)
                finally:
                    c.close()
        threads = [threading.Thread(target=slow, daemon=True) for _ in range(16)]
        for t in threads:
            t.start()
        try:
            poll_until(lambda: kuratest.accepted_sockets(s.proc.pid, self.mport) >= 16,
                       what="16 slow clients accepted")
            for _ in range(6):          # about 6 s while they trickle
                t0 = time.monotonic()
                # generous: before the fix it never answered while they ran
                self.assertEqual(http_get(self.mport, "/health", timeout=5), (200, "ok\n"))
                stop.wait(max(0, 1 - (time.monotonic() - t0)))
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        # the whole-request deadline: a byte every half second, never idle
        # for evhttp's timeout, is still closed at about 10 s
        c = socket.create_connection(("127.0.0.1", self.mport))
        c.settimeout(0.5)
        t0 = time.monotonic()
        got = None
        while time.monotonic() - t0 < 20 * kuratest.SCALE:
            try:
                c.sendall(b"X")
                got = c.recv(100)
                break
            except socket.timeout:
                continue
            except OSError:
                got = b""
                break
        c.close()
        self.assertEqual(got, b"", "a client trickling its headers for 20 s was not closed")
        self.assertGreaterEqual(time.monotonic() - t0, 8, "closed before the deadline")
        # a whole request within the deadline is served (the negative check)
        self.assertEqual(http_get(self.mport, "/health"), (200, "ok\n"))

    @kura_only
    def test_bad_requests(self):
        s = self.start_metrics()
        self.assertEqual(http_get(self.mport, "/metrics", method="POST")[0], 501)   # evhttp's answer
        self.assertEqual(http_get(self.mport, "/nothing")[0], 404)
        self.assertEqual(http_get(self.mport, "/health", method="HEAD")[0], 200)
        status = http_get(self.mport, "/health", headers={"X-Big": "x" * 9000})[0]
        self.assertIn(status, (400, 413, 431))
        # a body on a GET is refused (no body is taken)
        c = socket.create_connection(("127.0.0.1", self.mport))
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        c.settimeout(5 * kuratest.SCALE)
        self.assertRegex(c.recv(100), rb"^HTTP/1\.1 4\d\d ")
        c.close()
        # garbage: closed, the server goes on
        c = socket.create_connection(("127.0.0.1", self.mport))
        c.sendall(b"\x00\x01\x02 garbage\r\n\r\n")
        c.settimeout(5 * kuratest.SCALE)
        try:
            c.recv(100)
        except OSError:
            pass
        c.close()
        self.assertEqual(http_get(self.mport, "/health"), (200, "ok\n"))
        with s.conn() as mc:
            self.assertEqual(mc.request(b"version\r\n"), b"VERSION 1.6.18\r\n")

    @kura_only
    def test_bad_option_and_taken_port(self):
        if kuratest.is_memcached():
            self.skipTest(kuratest.not_applicable("kura's own option"))
        for bad in ["nope", "127.0.0.1:0", "127.0.0.1:70000", ":", "[::1", "[::1]", "::1",
                    "[::1]x:9150", "[::1:9150", "[]:9150", "127.0.0.1:", ""]:
            s = Server(kura_args=["-metrics", bad], start=False)
            p = subprocess.run(s.argv(free_port()), capture_output=True, timeout=30,
                               cwd=s.tmpdir)
            shutil.rmtree(s.tmpdir, True)
            # a parse error: exit 2, one line naming the option, never errno's text
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn(b"-metrics", p.stderr, bad)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, (bad, p.stderr))
            self.assertNotIn(b"Success", p.stderr, bad)
        # a taken port: the kurad already there keeps it, the second does not start
        s = self.start_metrics()
        s2 = Server(kura_args=["-metrics", "127.0.0.1:%d" % self.mport], start=False)
        p = subprocess.run(s2.argv(free_port()), capture_output=True, timeout=30, cwd=s2.tmpdir)
        shutil.rmtree(s2.tmpdir, True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"cannot listen", p.stderr)
        self.assertEqual(http_get(self.mport, "/health")[0], 200)


if __name__ == "__main__":
    kuratest.main()
