#!/usr/bin/python3
"""test_repl_history.py - replication's history check and its limits (issue
19, items 1 and 3; docs/replication.md, "History and divergence" and
"Limits and reconnects"), with real kurad processes, on hash files and on
the cache (one backend a run with KURA_DB; the scenario runs on both).

  Failover and return  the scenario of docs/replication.md's failover done
               as an operator would: the replica R stopped, the master M
               takes five writes, M stops, R restarts as a master and takes
               writes, M starts as R's replica.  M logs one WARNING naming
               the count and the file, the file holds the five writes (and
               "kuractl load" of it into a scratch database gives them
               back), M converges to R's digest, and its stats never say
               "connected" while it still holds the five keys.
  Negative     the same with the history taken out of the master's welcome
               (a proxy that strips it, as an older master sends): the
               replica says it cannot check, and the five keys survive on
               one side only; this is what the check prevents.
  Refuse       -repl-divergence refuse: the replica saves the rows, says
               what to do, and kurad exits with status 2.
  Lost tail    a master restarted from an older copy of its data and log
               (its log's tail lost): the replica holds rows the master
               does not, and the check finds them.
  New log      a master whose log directory was made anew: a new log id,
               the replica's position treated as none, a full copy.
  -I           a replica with a smaller -I than its master is refused (the
               master's line names the -I to use) and retries with the
               backoff: its connects stay few while its next attempt grows
               (polled); a fake master announcing a larger -I is refused by
               the replica itself; a replica with a larger -I follows.
  Lag          "unknown" while not connected; a number once rows flow.
"""
import os, re, shutil, socket, subprocess, sys, tempfile, threading
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kuratest
from kuratest import ServerTestCase, Server, poll_until, kura_only, stats
from test_repl import FakeMaster, Proxy, wait_caught_up, digest_diff

DIVERGED_RE = re.compile(r"WARNING: diverged from master \S+ \(sid \d+\): this server holds "
                         r"(\d+) rows the master never had .*?saved to (\S+?\.txt)")
FIVE = [b"five%d" % i for i in range(5)]


def kuractl(*args):
    path = os.path.join(os.path.dirname(kuratest.kurad_path()), "kuractl")
    p = subprocess.run([path] + [str(a) for a in args], capture_output=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def saved_keys(path):
    """The keys of the set lines of a saved-rows file (memcached format)."""
    with open(path, "rb") as f:
        data = f.read()
    keys, i = [], 0
    while i < len(data):
        j = data.index(b"\r\n", i)
        words = data[i:j].split()
        i = j + 2
        if words[0] == b"set":
            keys.append(words[1])
            i += int(words[4]) + 2
        else:
            keys.append(b"-" + words[1])
    return keys


class StripHistory(Proxy):
    """A forwarder to a master that strips the key=value words from the
    master's first line (what a master without histories sends)."""

    def _pipe(self, x, y, down):
        if down:
            buf = b""
            try:
                while b"\r\n" not in buf:
                    d = x.recv(65536)
                    if not d:
                        break
                    buf += d
                line, rest = buf.split(b"\r\n", 1) if b"\r\n" in buf else (buf, b"")
                y.sendall(b" ".join(line.split()[:3]) + b"\r\n" + rest)
            except OSError:
                pass
        Proxy._pipe(self, x, y, down)


@kura_only
class History(ServerTestCase):
    DB = "hash"
    EXT = {"hash": ".kh", "tree": ".kb"}

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kuratest-hist-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def db(self, name):
        d = os.path.join(self.dir, name)
        return d + self.EXT[self.DB] if self.DB in self.EXT else "*"

    def server(self, name, sid, master_port=None, args=(), port=None, item_max=None):
        """A kurad on the files of `name` (its database and name.ul), a
        replica of master_port if given."""
        a = ["-sid", str(sid), "-ulog", os.path.join(self.dir, name + ".ul")]
        if master_port:
            a += ["-mhost", "127.0.0.1", "-mport", str(master_port)]
        s = Server(db=self.db(name), kura_args=a + list(args), port=port, item_max=item_max)
        self.addCleanup(s.stop, check=False)
        return s

    def set(self, srv, key, value=b"v"):
        with srv.conn() as c:
            self.assertEqual(c.request(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value)),
                             b"STORED\r\n")

    def has(self, srv, key):
        with srv.conn() as c:
            return c.request(b"get %s\r\n" % key) != b"END\r\n"

    def failover(self, via=None, m_args=()):
        """The scenario up to the old master starting as the new master's
        replica: (old master now replica, new master)."""
        m = self.server("m", 1)
        r = self.server("r", 2, m.port)
        for i in range(10):
            self.set(m, b"k%d" % i)
        wait_caught_up(m, r)
        r.stop()
        for k in FIVE:
            self.set(m, k, b"only-on-m")
        m.stop()
        r2 = self.server("r", 2, port=r.port)           # promoted: no -mhost
        for i in range(3):
            self.set(r2, b"new%d" % i)
        port = via(r2.port).port if via else r2.port
        m2 = self.server("m", 1, port, args=m_args, port=m.port)
        return m2, r2

    def test_failover_and_return(self):
        samples, stop = [], threading.Event()
        m2_box = []

        def sample():
            # stats first, then the key: a "connected" seen before the copy
            # is in place would find the key still there
            while not stop.is_set():
                try:
                    with m2_box[0].conn() as c:
                        st = stats(c, b"repl")
                        held = c.request(b"get five0\r\n") != b"END\r\n"
                    samples.append((st.get("repl_state"), st.get("repl_lag_us"), held))
                except (OSError, AssertionError):
                    pass

        m2, r2 = self.failover()
        m2_box.append(m2)
        t = threading.Thread(target=sample, daemon=True)
        t.start()
        self.addCleanup(stop.set)
        poll_until(lambda: DIVERGED_RE.search(m2.stderr()), timeout=20,
                   what="the divergence WARNING")
        poll_until(lambda: not digest_diff(m2, r2), timeout=30, what="M to converge to R")
        stop.set()
        t.join(10)
        err = m2.stderr()
        self.assertEqual(len(DIVERGED_RE.findall(err)), 1, err)
        count, path = DIVERGED_RE.search(err).groups()
        self.assertEqual(int(count), 5)
        self.assertEqual(sorted(saved_keys(path)), sorted(FIVE))
        self.assertTrue(os.path.dirname(path) == os.path.join(self.dir, "m.ul"), path)
        for k in FIVE:
            self.assertFalse(self.has(m2, k))
        self.assertTrue(self.has(m2, b"new2"))
        # never "connected" while the diverged keys were still served
        self.assertTrue(samples)
        bad = [s for s in samples if s[0] == "connected" and s[2]]
        self.assertEqual(bad, [])
        # the copy is in place before the history is reset and the state
        # says connected: polled
        with m2.conn() as c:
            poll_until(lambda: stats(c, b"repl")["repl_state"] == "connected", timeout=10,
                       what="connected")
            poll_until(lambda: stats(c, b"repl")["repl_lag_us"] != "unknown", timeout=10,
                       what="the lag known (a heartbeat)")
            self.assertEqual(stats(c, b"repl")["repl_divergences"], "1")
        # the saved rows apply with kuractl load
        scratch = os.path.join(self.dir, "scratch.kh")
        rc, out, errb = kuractl("load", scratch, path)
        self.assertEqual(rc, 0, errb)
        rc, out, errb = kuractl("dump", scratch, "--format", "memcached")
        self.assertEqual(rc, 0, errb)
        for k in FIVE:
            self.assertIn(b"set %s 0 0 9\r\nonly-on-m\r\n" % k, out)
        # a restart keeps the history it took with the copy: no divergence again
        m2.stop()
        m3 = self.server("m", 1, r2.port, port=m2.port)
        wait_caught_up(r2, m3)
        self.assertNotIn("diverged", m3.stderr())

    def test_failover_without_history_check(self):
        """Negative: the check taken out (a welcome without a history),
        the five keys survive on the old master alone."""
        proxies = []

        def via(port):
            p = StripHistory(port)
            proxies.append(p)
            self.addCleanup(p.close)
            return p

        m2, r2 = self.failover(via=via)
        poll_until(lambda: "sends no history" in m2.stderr(), timeout=20,
                   what="the cannot-check WARNING")
        wait_caught_up(r2, m2)
        self.assertTrue(self.has(m2, b"new2"))
        diff = digest_diff(m2, r2)
        self.assertEqual(diff, set(FIVE))
        self.assertNotIn("diverged", m2.stderr())

    def test_divergence_refuse(self):
        # through a proxy held until the replica is up: the harness sees it
        # start before it stops
        held = []

        def via(port):
            p = Proxy(port)
            p.pause()
            held.append(p)
            self.addCleanup(p.close)
            return p

        m2, r2 = self.failover(via=via, m_args=["-repl-divergence", "refuse"])
        held[0].resume()
        poll_until(lambda: m2.proc.poll() is not None, timeout=20,
                   what="kurad to stop: " + m2.stderr())
        self.assertEqual(m2.proc.returncode, 2, m2.stderr())
        err = m2.stderr()
        self.assertIn("stopped on divergence", err)
        count, path = DIVERGED_RE.search(err).groups()
        self.assertEqual(sorted(saved_keys(path)), sorted(FIVE))
        m2._stopped = True

    def test_master_lost_log_tail(self):
        """A master restarted from an older copy of its files: the rows its
        replica got from it since are found, not kept silently."""
        if self.DB == "cache":
            self.skipTest(kuratest.not_applicable("the cache has no files to copy back"))
        m = self.server("m", 1)
        r = self.server("r", 2, m.port)
        self.set(m, b"a")
        wait_caught_up(m, r)
        m.stop()
        keep = os.path.join(self.dir, "keep")
        os.mkdir(keep)
        shutil.copytree(os.path.join(self.dir, "m.ul"), os.path.join(keep, "m.ul"))
        copy = shutil.copytree if os.path.isdir(self.db("m")) else shutil.copy
        copy(self.db("m"), os.path.join(keep, "db"))
        m = self.server("m", 1, port=m.port)
        for k in FIVE:
            self.set(m, k)
        wait_caught_up(m, r)
        r.stop()
        m.stop()
        shutil.rmtree(os.path.join(self.dir, "m.ul"))
        shutil.copytree(os.path.join(keep, "m.ul"), os.path.join(self.dir, "m.ul"))
        if os.path.isdir(self.db("m")):
            shutil.rmtree(self.db("m"))
        copy(os.path.join(keep, "db"), self.db("m"))
        m = self.server("m", 1, port=m.port)
        r = self.server("r", 2, m.port, port=r.port)
        poll_until(lambda: DIVERGED_RE.search(r.stderr()), timeout=20, what="the divergence")
        count, path = DIVERGED_RE.search(r.stderr()).groups()
        self.assertEqual(sorted(saved_keys(path)), sorted(FIVE))
        poll_until(lambda: not digest_diff(m, r), timeout=30, what="R to converge to M")

    def test_master_log_made_anew(self):
        """A master whose update-log directory was made anew (its data
        kept): a new log id, so the replica's position counts in another
        log; it gets a full copy and converges, its rows saved first (the
        new log's history knows none of them)."""
        if self.DB == "cache":
            self.skipTest(kuratest.not_applicable("the cache's data lives in its log"))
        m = self.server("m", 1)
        r = self.server("r", 2, m.port)
        for i in range(5):
            self.set(m, b"a%d" % i)
        wait_caught_up(m, r)
        with r.conn() as c:
            old_hid = stats(c, b"repl")["repl_master_hid"]
        m.stop()
        shutil.rmtree(os.path.join(self.dir, "m.ul"))
        m = self.server("m", 1, port=m.port)
        self.set(m, b"after")
        with m.conn() as c:
            new_hid = stats(c, b"repl")["ulog_hid"]
        self.assertNotEqual(new_hid, old_hid)
        def follows():
            with r.conn() as c:
                st = stats(c, b"repl")
            return st["repl_master_hid"] == new_hid and st["repl_state"] == "connected"
        poll_until(follows, timeout=30, what="the replica on the new log")
        poll_until(lambda: not digest_diff(m, r), timeout=30, what="R to converge to M")
        self.assertIn("counts in another update log", m.stderr())

    def refused_backoff(self, r, connects):
        """The replica refused: its state says so, and its next attempt
        grows while its connects stay few (a retry ten times a second would
        have made many by the time the wait reaches 1.6 s)."""
        def waited():
            with r.conn() as c:
                st = stats(c, b"repl")
            return st["repl_state"] == "refused" and int(st["repl_next_attempt_ms"]) >= 1600
        poll_until(waited, timeout=30, what="the backoff to reach 1.6 s")
        with r.conn() as c:
            st = stats(c, b"repl")
        self.assertLessEqual(connects(st), 8)
        self.assertEqual(st["repl_lag_us"], "unknown")
        self.assertEqual(st["repl_lag_seconds"], "unknown")
        return st

    def test_item_max_smaller_replica_refused(self):
        if self.DB == "cache":
            self.skipTest(kuratest.not_applicable("the same on every backend: run on hash"))
        m = self.server("m", 1, item_max="2m")
        r = self.server("r", 2, m.port, item_max="1m")
        st = self.refused_backoff(r, lambda st: int(st["repl_connects"]))
        want = "start the replica with -I 2097152 or more"
        self.assertIn(want, st["repl_last_error"])
        self.assertEqual(r.stderr().count(want), 1, r.stderr())

    def test_item_max_fake_master_refused(self):
        """A master (here a fake one, which does not refuse first) announcing
        a larger -I: the replica refuses it."""
        if self.DB == "cache":
            self.skipTest(kuratest.not_applicable("the same on every backend: run on hash"))
        fm = FakeMaster(lambda n, line: b"REPL 0 1 hid=00000000000000aa imax=99999999 hist=-\r\n",
                        hold=lambda n: True)
        self.addCleanup(fm.close)
        r = self.server("r", 2, fm.port)
        self.refused_backoff(r, lambda st: len(fm.asked))
        self.assertIn("start this replica with -I 99999999 or more", r.stderr())

    def test_item_max_larger_replica_follows(self):
        if self.DB == "cache":
            self.skipTest(kuratest.not_applicable("the same on every backend: run on hash"))
        m = self.server("m", 1, item_max="1m")
        r = self.server("r", 2, m.port, item_max="4m")
        self.set(m, b"x")
        wait_caught_up(m, r)
        with m.conn() as c:
            mst = stats(c, b"repl")
        with r.conn() as c:
            st = stats(c, b"repl")
        self.assertEqual(st["repl_state"], "connected")
        self.assertTrue(self.has(r, b"x"))
        # the rts file keeps the master's log id beside the position
        with open(os.path.join(self.dir, "r.ul", "rts")) as f:
            pos, rts_hid = f.read().split()
        with open(os.path.join(self.dir, "m.ul", "hid")) as f:
            self.assertEqual(rts_hid, f.read().strip())
        self.assertEqual(st["repl_master_hid"], rts_hid)
        self.assertEqual(mst["ulog_hid"], rts_hid)
        self.assertRegex(mst["ulog_history"], r"^1:\d+$")


@kura_only
class HistoryCache(History):
    """The scenario on the in-memory cache (rebuilt from its update log)."""
    DB = "cache"


_BY_DB = {"hash": "History", "cache": "HistoryCache"}
if os.environ.get("KURA_DB") in _BY_DB:
    for _db, _cls in _BY_DB.items():
        if _db != os.environ["KURA_DB"]:
            del globals()[_cls]
elif os.environ.get("KURA_DB") == "tree":
    History.DB = "tree"
    del globals()["HistoryCache"]

if __name__ == "__main__":
    kuratest.main()
