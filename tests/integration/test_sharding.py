#!/usr/bin/env python3
"""Sharding with twemproxy (Debian's nutcracker) in front of three kurad.

Each test starts three masters (-ulog, -sid) with a read-only replica each
(-mhost) and nutcracker (ketama, hash fnv1a_64, the servers named shard1..3
in the "host:port:weight name" form) in front of the masters, and talks to
nutcracker with pymemcache, as docs/operations.md's "Sharding with twemproxy
(nutcracker)" sets it up.

  Spread       sets, gets, multi-gets, deletes and incr through nutcracker;
               `keys` and `stats curr_items` of each master: every key on
               exactly one master, all three used; each replica's digest
               equal to its master's
  Replica      kill -9 of a shard's replica: reads and writes through
               nutcracker unaffected; the replica restarted catches up
  Syncrepl     a master with -syncrepl 1 and its one replica killed: each
               set waits the timeout, then "SERVER_ERROR unknown" from
               nutcracker (-syncrepl-fail close: kurad closed the
               connection; the change stored) or STORED (ack)
  Repoint      (auto_eject_hosts: false) kill -9 of a shard's master: its
               keys answer nutcracker's "SERVER_ERROR Connection refused",
               past the failure limit too (never re-routed), the other
               shards' keys are served; the data is on the replica:
               `kuractl repl promote`, nutcracker restarted with the
               replica's address under the same name: every key of the
               shard served again, writes land on the promoted replica.
               Negative check: the replica listed without the name (its
               address names it) misses some of the shard's keys
  Eject        (auto_eject_hosts: true) the same kill: at most
               server_failure_limit requests answer the error, then the
               shard is ejected (nutcracker's stats say so) and its keys go
               to the other shards: gets miss, sets land there
  Return       (auto_eject_hosts: true, server_retry_timeout 300 ms) a key
               set while its master was out lands on another shard; the
               master restarted is taken back and answers the old value,
               the newer one left on the other shard, unseen

Skipped as a missing dependency without nutcracker (apt-get install
nutcracker; KURA_NUTCRACKER names another binary) or pymemcache
(python3-pymemcache).
"""
import json, os, shutil, signal, socket, subprocess, sys, tempfile, time, unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, poll_until, kura_only, stats, digest

try:
    from pymemcache.client.base import Client
    from pymemcache.exceptions import MemcacheServerError
except ImportError:
    Client = None

TIMEOUT = 30 * kuratest.SCALE
NUTCRACKER = (os.environ.get("KURA_NUTCRACKER") or shutil.which("nutcracker")
              or "/usr/sbin/nutcracker")
FAILURE_LIMIT = 2
# Keys that spread over the ring: twemproxy's fnv1a_64 is computed in 32
# bits, so keys differing only in their last characters hash close together.
KEYS = [b"%d:item" % i for i in range(600)]


def kuractl_path():
    return os.path.join(os.path.dirname(kuratest.kurad_path()), "kuractl")


def addr(server):
    return "127.0.0.1:%d" % server.port


def start(sid, master=None, args=()):
    """A kurad with its own -sid and -ulog (in its temp dir), a replica of
    master when given."""
    s = Server(start=False)
    a = ["-sid", str(sid), "-ulog", os.path.join(s.tmpdir, "ulog")] + list(args)
    if master is not None:
        a += ["-mhost", "127.0.0.1", "-mport", str(master.port)]
    s.kura_args = a
    return s.start()


def restart(server):
    """The same server again (its temp dir, files and arguments) after a
    kill -9, on a port of its own."""
    server._stopped = False
    return server.start()


def keys_of(server):
    """The keys in a server's store, by kura's `keys` listing."""
    with server.conn() as c:
        c.send(b"keys\r\n")
        out = set()
        while True:
            ln = c.line()
            if ln == b"END\r\n":
                return out
            assert ln.startswith(b"KEY "), ln
            out.add(ln[4:-2])


def repl_stats(server):
    with server.conn() as c:
        return stats(c, b"repl")


def converged(replica, master):
    """Connected, at its master's last row, with the same digest."""
    m, r = repl_stats(master), repl_stats(replica)
    return (r.get("repl_connected") == "1" and int(r["repl_position"]) >= int(m["ulog_last_ts"])
            and digest(replica) == digest(master))


class Nutcracker:
    """nutcracker on a free port (or `port`) with one pool, "alpha", in
    front of `servers`: a list of (address, name or None)."""

    def __init__(self, servers, auto_eject, port=None, retry_ms=60000):
        self.servers, self.auto_eject, self.fixed_port = servers, auto_eject, port
        self.retry_ms = retry_ms
        self.tmpdir = tempfile.mkdtemp(prefix="kuratest-nutcracker-")
        self.proc = None
        self.start()

    def config(self, port):
        lines = ["alpha:",
                 "  listen: 127.0.0.1:%d" % port,
                 "  hash: fnv1a_64",
                 "  distribution: ketama",
                 "  timeout: %d" % int(3000 * kuratest.SCALE),
                 "  auto_eject_hosts: %s" % ("true" if self.auto_eject else "false"),
                 "  server_retry_timeout: %d" % self.retry_ms,
                 "  server_failure_limit: %d" % FAILURE_LIMIT,
                 "  servers:"]
        for a, name in self.servers:
            lines.append("   - %s:1%s" % (a, " " + name if name else ""))
        return "\n".join(lines) + "\n"

    def start(self):
        for attempt in range(8):
            port = self.fixed_port or kuratest.free_port()
            self.stats_port = kuratest.free_port()
            self.conf = os.path.join(self.tmpdir, "nutcracker.yml")
            with open(self.conf, "w") as f:
                f.write(self.config(port))
            log = os.path.join(self.tmpdir, "nutcracker.log")
            self.proc = subprocess.Popen(
                [NUTCRACKER, "-c", self.conf, "-s", str(self.stats_port), "-a", "127.0.0.1",
                 "-i", "100", "-o", log, "-p", os.path.join(self.tmpdir, "pid")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)
            end = kuratest.deadline(10)
            while self.proc.poll() is None and time.monotonic() < end:
                if (kuratest._owns_listener(self.proc.pid, port)
                        and kuratest._owns_listener(self.proc.pid, self.stats_port)):
                    self.port = port
                    return self
                time.sleep(0.02)
            text = open(log, errors="replace").read()
            self.stop()
            if "in use" not in text:
                raise AssertionError("nutcracker did not start:\n%s" % text[-3000:])
        raise AssertionError("nutcracker found no free port")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self, servers):
        """Stopped and started on the same port with other servers."""
        self.stop()
        self.servers, self.fixed_port = servers, self.port
        return self.start()

    def stats(self):
        """nutcracker's stats (JSON, on its stats port)."""
        with socket.create_connection(("127.0.0.1", self.stats_port), timeout=5) as s:
            data = b""
            while True:
                got = s.recv(65536)
                if not got:
                    return json.loads(data.decode())
                data += got

    def pool_stats(self, until):
        """The pool's stats once until(them) holds (nutcracker gathers them
        every -i 100 ms, so they lag)."""
        def now():
            st = self.stats()["alpha"]
            return st if until(st) else None
        return poll_until(now, timeout=TIMEOUT, what="nutcracker's stats")

    def request(self, data):
        """One raw request on a connection of its own: the exact reply."""
        with kuratest.Conn(self.port) as c:
            return c.request(data)

    def client(self):
        return Client(("127.0.0.1", self.port), timeout=5 * kuratest.SCALE,
                      connect_timeout=5 * kuratest.SCALE, default_noreply=False)


@kura_only
class ShardingTest(unittest.TestCase):

    def setUp(self):
        if kuratest.db_kind() != "hash":
            # what is tested is the proxy's routing and replication under
            # it, the same on every backend: once is enough (100 s in three)
            self.skipTest(kuratest.not_applicable("the same on every backend: run on hash"))
        if not os.access(NUTCRACKER, os.X_OK):
            self.skipTest(kuratest.missing("nutcracker (apt-get install nutcracker)"))
        if Client is None:
            self.skipTest(kuratest.missing("pymemcache (apt-get install python3-pymemcache)"))

    def cluster(self, auto_eject=False, retry_ms=int(60000 * kuratest.SCALE)):
        """Three masters, a replica each, nutcracker in front of the masters;
        KEYS set through it (value v<key>).  Sets self.masters and
        self.replicas; returns (nutcracker, a pymemcache client of it,
        {shard index: the keys its master holds})."""
        self.masters = [start(i + 1) for i in range(3)]
        self.replicas = [start(i + 11, master=m) for i, m in enumerate(self.masters)]
        for s in self.masters + self.replicas:
            self.addCleanup(s.stop)
        nc = Nutcracker(self.named(self.masters), auto_eject, retry_ms=retry_ms)
        self.addCleanup(nc.stop)
        self.addCleanup(shutil.rmtree, nc.tmpdir, True)
        c = nc.client()
        self.addCleanup(c.close)
        for k in KEYS:
            self.assertTrue(c.set(k, b"v" + k), k)
        shards = {i: keys_of(m) for i, m in enumerate(self.masters)}
        return nc, c, shards

    @staticmethod
    def named(servers):
        return [(addr(s), "shard%d" % (i + 1)) for i, s in enumerate(servers)]

    def check_shards(self, shards):
        """Every key on exactly one master, every master with some."""
        for i, keys in shards.items():
            self.assertGreater(len(keys), 0, "shard%d got no key" % (i + 1))
        union = set().union(*shards.values())
        self.assertEqual(sum(len(k) for k in shards.values()), len(union), "a key on two shards")
        self.assertEqual(union, set(KEYS))

    def wait_converged(self):
        for m, r in zip(self.masters, self.replicas):
            poll_until(lambda: converged(r, m), timeout=TIMEOUT, what="%r to converge" % r)

    # ---- all up ------------------------------------------------------------------
    def test_spread_over_three_shards(self):
        nc, c, shards = self.cluster()
        self.check_shards(shards)
        for i, m in enumerate(self.masters):
            with m.conn() as mc:
                self.assertEqual(int(stats(mc)["curr_items"]), len(shards[i]))
        # gets one by one and multi-gets spanning the shards
        for k in KEYS[:100]:
            self.assertEqual(c.get(k), b"v" + k)
        for at in range(0, len(KEYS), 50):
            batch = KEYS[at:at + 50]
            got = c.get_many(batch)
            self.assertEqual(got, {k: b"v" + k for k in batch})
        # deletes and incr
        gone = KEYS[::7]
        for k in gone:
            self.assertTrue(c.delete(k), k)
        self.assertEqual(c.get_many(gone), {})
        self.assertFalse(c.delete(gone[0]))
        counters = [b"%d:count" % i for i in range(60)]
        for n, k in enumerate(counters):
            c.set(k, b"%d" % n)
            self.assertEqual(c.incr(k, 5), n + 5)
        self.assertIsNone(c.incr(b"no:such:counter", 1))
        self.assertEqual(c.get_many(counters), {k: b"%d" % (n + 5) for n, k in enumerate(counters)})
        # the raw reply is kurad's, passed through
        self.assertEqual(nc.request(b"get %s\r\n" % KEYS[1]),
                         b"VALUE %s 0 %d\r\nv%s\r\nEND\r\n" % (KEYS[1], len(KEYS[1]) + 1, KEYS[1]))
        now = {i: keys_of(m) for i, m in enumerate(self.masters)}
        for i in now:               # deletes and counters landed where ketama put them
            self.assertEqual(now[i] & set(KEYS), shards[i] - set(gone))
        self.assertEqual(set().union(*now.values()), (set(KEYS) - set(gone)) | set(counters))
        self.wait_converged()

    # ---- a replica dies --------------------------------------------------------------
    def test_replica_dies_and_catches_up(self):
        nc, c, shards = self.cluster()
        self.wait_converged()
        self.replicas[1].kill9()
        for k in KEYS:
            self.assertEqual(c.get(k), b"v" + k)
        for k in KEYS[::3]:
            self.assertTrue(c.set(k, b"w" + k), k)
        self.assertTrue(c.delete(KEYS[1]))
        got = c.get_many(KEYS[:60])
        self.assertEqual(len(got), 59)
        restart(self.replicas[1])
        self.wait_converged()
        r = self.replicas[1]
        self.assertEqual(keys_of(r), shards[1] - {KEYS[1]})

    def test_syncrepl_master_loses_its_replica(self):
        """One shard whose master runs with -syncrepl 1: its replica killed,
        a set waits -syncrepl-timeout, then with -syncrepl-fail close kurad
        closes the connection and nutcracker answers SERVER_ERROR unknown
        (the change is stored all the same); with ack the client gets
        STORED."""
        for fail, reply in (("close", b"SERVER_ERROR unknown\r\n"), ("ack", b"STORED\r\n")):
            m = start(1, args=["-syncrepl", "1", "-syncrepl-timeout", "300", "-syncrepl-fail", fail])
            r = start(11, master=m)
            self.addCleanup(m.stop)
            self.addCleanup(r.stop)
            nc = Nutcracker([(addr(m), "shard1")], auto_eject=False)
            self.addCleanup(nc.stop)
            self.addCleanup(shutil.rmtree, nc.tmpdir, True)
            self.assertEqual(nc.request(b"set a 0 0 1\r\n1\r\n"), b"STORED\r\n")
            r.kill9()
            for v in (b"2", b"3"):
                self.assertEqual(nc.request(b"set a 0 0 1\r\n%s\r\n" % v), reply, fail)
                self.assertEqual(nc.request(b"get a\r\n"), b"VALUE a 0 1\r\n%s\r\nEND\r\n" % v)
            if fail == "close":         # nutcracker saw kurad close the connection
                nc.pool_stats(lambda a: a["shard1"]["server_eof"] >= 2)
            else:                       # every request answered on one connection
                st = nc.pool_stats(lambda a: a["shard1"]["responses"] >= 5)
                self.assertEqual(st["shard1"]["server_eof"], 0)

    # ---- a master dies ----------------------------------------------------------------
    def kill_master(self, shards):
        """kill -9 of the master with the most keys; (index, its keys)."""
        i = max(shards, key=lambda j: len(shards[j]))
        self.wait_converged()
        self.masters[i].kill9()
        return i, sorted(shards[i])

    def test_master_dies_promote_and_repoint(self):
        nc, c, shards = self.cluster(auto_eject=False)
        i, dead = self.kill_master(shards)
        live = sorted(set(KEYS) - set(dead))
        # the dead shard's keys fail, past the failure limit too: never re-routed
        for n in range(3 * FAILURE_LIMIT):
            self.assertEqual(nc.request(b"get %s\r\n" % dead[n]), b"SERVER_ERROR Connection refused\r\n")
            self.assertEqual(nc.request(b"set %s 0 0 1\r\nx\r\n" % dead[n]),
                             b"SERVER_ERROR Connection refused\r\n")
        with self.assertRaises(MemcacheServerError):
            c.get(dead[0])
        # the other shards are served; a multi-get touching the dead shard fails whole
        for k in live[:50]:
            self.assertEqual(c.get(k), b"v" + k)
        self.assertEqual(nc.request(b"get %s %s\r\n" % (live[0], dead[0])),
                         b"SERVER_ERROR Connection refused\r\n")
        st = nc.pool_stats(lambda a: a["shard%d" % (i + 1)]["server_err"] >= 6 * FAILURE_LIMIT)
        self.assertEqual((st["server_ejects"], st["shard%d" % (i + 1)]["server_ejected_at"]), (0, 0))
        # the data is on the replica; promote it and re-point nutcracker at it
        r = self.replicas[i]
        self.assertEqual(keys_of(r), set(dead))
        p = subprocess.run([kuractl_path(), "repl", "promote", addr(r)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout.decode(), r"^PROMOTED \d+ \d+\n$")
        up = list(self.masters)
        up[i] = r
        # negative check first: the replica listed under its address, not the
        # shard's name, gets other points on the ring: the shard's keys miss
        plain = self.named(up)
        plain[i] = (addr(r), None)
        nc.restart(plain)
        c2 = nc.client()
        self.addCleanup(c2.close)
        found = c2.get_many(dead)
        # (how many depends on the port, which names it; about half in runs here)
        self.assertLess(len(found), len(dead), "every key found without the shard's name")
        # the same name: every key of the shard served again, writes land on it
        nc.restart(self.named(up))
        c3 = nc.client()
        self.addCleanup(c3.close)
        self.assertEqual(c3.get_many(dead), {k: b"v" + k for k in dead})
        for k in dead[:20]:
            self.assertTrue(c3.set(k, b"new"), k)
            self.assertEqual(r.request(b"get %s\r\n" % k), b"VALUE %s 0 3\r\nnew\r\nEND\r\n" % k)
        self.assertEqual(len(c3.get_many(live)), len(live))
        self.assertEqual(set(c3.get_many(KEYS)), set(KEYS))

    def test_master_dies_auto_eject(self):
        nc, c, shards = self.cluster(auto_eject=True)
        i, dead = self.kill_master(shards)
        name = "shard%d" % (i + 1)
        # errors until the failure limit (the cut connection counts as one),
        # then the shard is out of the ring: its keys go to the others
        replies = []
        for k in dead[:3 * FAILURE_LIMIT]:
            replies.append(nc.request(b"get %s\r\n" % k))
        errors = replies.count(b"SERVER_ERROR Connection refused\r\n")
        self.assertTrue(1 <= errors <= FAILURE_LIMIT, replies)
        self.assertEqual(replies[:errors], [b"SERVER_ERROR Connection refused\r\n"] * errors)
        self.assertEqual(replies[errors:], [b"END\r\n"] * (len(replies) - errors), replies)
        st = nc.pool_stats(lambda a: a[name]["server_ejected_at"] > 0)
        self.assertEqual(st["server_ejects"], 1)
        # every key of the dead shard misses now (its data is on its replica,
        # not on the others); a set lands on a surviving master
        self.assertEqual(c.get_many(dead), {})
        self.assertEqual(keys_of(self.replicas[i]), set(dead))
        self.assertTrue(c.set(dead[0], b"elsewhere"))
        holders = [j for j, m in enumerate(self.masters) if j != i and dead[0] in keys_of(m)]
        self.assertEqual(len(holders), 1, holders)
        live = sorted(set(KEYS) - set(dead))
        self.assertEqual(c.get_many(live), {k: b"v" + k for k in live})

    def test_ejected_master_returns(self):
        """auto_eject_hosts with a short server_retry_timeout: a key set
        while its shard was out lands on another shard; once the master is
        back nutcracker takes it into the ring again and answers its old
        value, the other shard keeping the newer one, unseen."""
        nc, c, shards = self.cluster(auto_eject=True, retry_ms=300)
        i, dead = self.kill_master(shards)
        key = dead[0]

        def stored_elsewhere():
            try:
                return nc.request(b"set %s 0 0 9\r\nelsewhere\r\n" % key) == b"STORED\r\n"
            except kuratest.Closed:
                return False
        poll_until(stored_elsewhere, timeout=TIMEOUT, what="the set re-routed")
        holders = [m for j, m in enumerate(self.masters) if j != i and key in keys_of(m)]
        self.assertEqual(len(holders), 1)
        m = self.masters[i]
        m.fixed_port = m.port
        restart(m)
        old = b"VALUE %s 0 %d\r\nv%s\r\nEND\r\n" % (key, len(key) + 1, key)
        poll_until(lambda: nc.request(b"get %s\r\n" % key) == old, timeout=TIMEOUT,
                   what="the returned master to answer its key")
        self.assertEqual(holders[0].request(b"get %s\r\n" % key),
                         b"VALUE %s 0 9\r\nelsewhere\r\nEND\r\n" % key)


if __name__ == "__main__":
    kuratest.main()
