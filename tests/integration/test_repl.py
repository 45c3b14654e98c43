#!/usr/bin/python3
"""test_repl.py - the update log and replication, end to end, with real kurad
processes (docs/replication.md): on hash files, B+ trees and caches, one
backend a run (KURA_DB; tests/run runs the three side by side).

  Commands     every kind of change made on a master reaches its replica as
               the same item (value, flags, cas), flush_all included; the
               replica answers reads (pymemcache too) and refuses writes
               with its SERVER_ERROR.
  Chain        master -> replica -> replica: the second keeps the master's
               server id and origin timestamps in its own update log.
  Restart      a master killed with -9 and started again on its port: the
               replica reconnects by itself and goes on.
  Cut link     a proxy between them cut several times under a stream of
               sets and incrs: the replica ends equal to the master, every
               key and every counter (rows applied twice do no harm).
  Bootstrap    a master whose data predates its update log, a replica that
               starts empty: a full copy; a replica left behind the -ulmax
               cap: a full copy again, and the key the master deleted while
               it was away is deleted on it too.
  Kill -9      a master killed under load: after the restart its store and
               its update log agree, key by key (value, flags, cas).
  Garbage      a fake master that answers with bytes that are not rows, or
               with a wrong line: the replica logs it (control bytes
               escaped), reconnects with backoff and keeps serving reads.
  Torn log     an update-log file cut inside its last row: the restart cuts
               it, says so in the log, and serves.
  Dual master  two servers, each the -rw replica of the other: changes of
               either reach both, and each skips its own coming back.
  Command      "repl" on a server without -ulog, with bad numbers, with
               missing tokens.
"""
import os, random, shutil, socket, struct, sys, tempfile, threading, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase, Server, poll_until, kura_only, stats, gets_all

READ_ONLY = b"SERVER_ERROR this server is a read-only replica (write to its master)\r\n"

# ---- the update log's row format (docs/formats.md), for reading a stream ----

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _var(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, i
        shift += 7


def _unzig(v):
    return (v >> 1) ^ -(v & 1)


HDR, PUT, DEL, FLUSH, MARK = 1, 2, 3, 4, 5


def decode_rows(buf):
    """(rows, rest): every whole row at the start of buf, as dicts."""
    rows, i = [], 0
    while len(buf) - i >= 5:
        try:
            ln, j = _var(buf, i + 4)
        except IndexError:
            break
        end = j + ln
        if end > len(buf):
            break
        assert crc32c(buf[i + 4:end]) == struct.unpack_from("<I", buf, i)[0], "row crc"
        t = buf[j]
        ts, k = _var(buf, j + 1)
        sid, k = _var(buf, k)
        r = {"type": t, "ts": ts, "sid": sid, "origin_ts": ts}
        if t in (HDR, MARK):
            r["prev_ts"], k = _var(buf, k)
        else:
            d, k = _var(buf, k)
            r["origin_ts"] = ts - d
        if t == PUT:
            r["flags"], k = _var(buf, k)
            e, k = _var(buf, k)
            r["exptime"] = _unzig(e)
            r["cas"], k = _var(buf, k)
        if t in (PUT, DEL):
            kl, k = _var(buf, k)
            r["key"] = bytes(buf[k:k + kl])
            k += kl
        if t == PUT:
            vl, k = _var(buf, k)
            r["value"] = bytes(buf[k:k + vl])
            k += vl
        if t == FLUSH:
            e, k = _var(buf, k)
            r["exptime"] = _unzig(e)
            r["cas"], k = _var(buf, k)
        assert k == end, "row length"
        rows.append(r)
        i = end
    return rows, buf[i:]


def _put_var(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_put(ts, sid, key, value, flags=0, cas=1):
    """A PUT row as the update log encodes it (made here: origin = ts)."""
    f = (bytes([PUT]) + _put_var(ts) + _put_var(sid) + _put_var(0) + _put_var(flags)
         + _put_var(0) + _put_var(cas) + _put_var(len(key)) + key + _put_var(len(value)) + value)
    body = _put_var(len(f)) + f
    return struct.pack("<I", crc32c(body)) + body


# -syncrepl-timeout for a replica that is expected to confirm in time
SYNCREPL_TIMEOUT_MS = int(min(1500 * kuratest.SCALE, 6000))


def read_log(port, after=1, sid=999, timeout=15):
    """Every row of the server's update log after `after` (1: from the
    start, while the first file is held), until its first heartbeat."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout * kuratest.SCALE)
    try:
        s.sendall(b"repl %d %d\r\n" % (after, sid))
        buf = b""
        while b"\r\n" not in buf:
            buf += s.recv(65536)
        line, buf = buf.split(b"\r\n", 1)
        assert line.startswith(b"REPL "), line
        rows, end = [], kuratest.deadline(timeout)
        while time.monotonic() < end:
            got, buf = decode_rows(buf)
            for r in got:
                if r["type"] == MARK:
                    return rows
                rows.append(r)
            data = s.recv(1 << 20)
            assert data, "stream closed"
            buf += data
        raise AssertionError("no heartbeat within %ss" % timeout)
    finally:
        s.close()


def last_ts(server):
    with server.conn() as c:
        return int(stats(c)["ulog_last_ts"])


def wait_caught_up(master, replica, timeout=15):
    """Until the replica's position is the master's last row."""
    def done():
        with replica.conn() as c:
            st = stats(c)
        return st.get("repl_connected") == "1" and int(st["repl_position"]) >= last_ts(master)
    poll_until(done, timeout=timeout, what="the replica to catch up")


def digest(server, n=64, bucket=None):
    with server.conn() as c:
        cmd = b"digest %d" % n + (b" %d" % bucket if bucket is not None else b"") + b"\r\n"
        c.send(cmd)
        lines = []
        while True:
            ln = c.line()
            if ln == b"END\r\n":
                return lines
            lines.append(ln.rstrip(b"\r\n"))


def digest_diff(a, b, n=64):
    """The keys whose items differ between two servers, by "digest"."""
    da, db = digest(a, n), digest(b, n)
    keys = set()
    for la, lb in zip(da, db):
        if la != lb:
            bucket = int(la.split()[1])
            ka, kb = set(digest(a, n, bucket)), set(digest(b, n, bucket))
            keys |= {ln.split()[1] for ln in ka ^ kb}
    return keys


class FakeMaster:
    """Answers the n-th connection's first line with answer(n, line), then
    closes it (or keeps it open while hold(n))."""

    def __init__(self, answer, hold=lambda n: False):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(8)
        self.port = self.ls.getsockname()[1]
        self.asked, self.conns = [], []
        self.answer, self.hold = answer, hold
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                a, _ = self.ls.accept()
            except OSError:
                return
            self.conns.append(a)
            try:
                line = a.recv(200)
                n = len(self.asked)
                self.asked.append(line)
                a.sendall(self.answer(n, line))
                if not self.hold(n):
                    a.close()
            except OSError:
                pass

    def close(self):
        self.ls.close()
        for a in self.conns:
            a.close()


class Proxy:
    """A TCP forwarder from a local port to target, whose connections the
    test can cut."""

    def __init__(self, target_port):
        self.target = target_port
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(8)
        self.port = self.ls.getsockname()[1]
        self.socks, self.lock, self.accepted = [], threading.Lock(), 0
        self.flowing = threading.Event()
        self.flowing.set()
        self.budget = None
        threading.Thread(target=self._accept, daemon=True).start()

    def pause(self):
        """Hold what either side sends (the connections stay up)."""
        self.flowing.clear()

    def resume(self):
        self.flowing.set()

    def _accept(self):
        while True:
            try:
                a, _ = self.ls.accept()
            except OSError:
                return
            try:
                b = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                a.close()
                continue
            if b.getsockname() == b.getpeername():
                # nothing listened there and TCP connected the socket to
                # itself (simultaneous open): it must not keep the port
                b.close()
                a.close()
                continue
            with self.lock:
                self.socks += [a, b]
                self.accepted += 1
            for x, y, down in ((a, b, False), (b, a, True)):
                threading.Thread(target=self._pipe, args=(x, y, down), daemon=True).start()

    def hold_after(self, n):
        """Pause once n more bytes have gone from the server to the client."""
        self.budget = n

    def _pipe(self, x, y, down):
        try:
            while True:
                d = x.recv(4096)
                if not d:
                    break
                self.flowing.wait()
                if down and self.budget is not None:
                    first, d = d[:self.budget], d[self.budget:]
                    y.sendall(first)
                    self.budget -= len(first)
                    if self.budget == 0:
                        self.budget = None
                        self.flowing.clear()
                        self.flowing.wait()
                if d:
                    y.sendall(d)
        except OSError:
            pass
        for s in (x, y):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def close(self):
        self.ls.close()
        self.cut()


@kura_only
class Replication(ServerTestCase):

    def setUp(self):
        # no server of the harness's own: each test starts its master and replicas
        self.dir = tempfile.mkdtemp(prefix="kuratest-repl-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    DB = "hash"

    def db(self, d):
        return d + self.EXT[self.DB] if self.DB in self.EXT else "*"

    EXT = {"hash": ".kh", "tree": ".kb"}

    def master(self, name="m", args=(), port=None, ulog=True, start=True):
        d = os.path.join(self.dir, name)
        a = ["-sid", "1"] + (["-ulog", d + ".ul"] if ulog else []) + list(args)
        s = Server(db=self.db(d), kura_args=a, port=port, start=start)
        self.addCleanup(s.stop, check=False)
        return s

    def replica(self, master_port, name="r", sid=2, args=(), port=None):
        d = os.path.join(self.dir, name)
        s = Server(db=self.db(d), port=port,
                   kura_args=["-sid", str(sid), "-ulog", d + ".ul", "-mhost", "127.0.0.1",
                              "-mport", str(master_port)] + list(args))
        self.addCleanup(s.stop, check=False)
        return s

    def test_every_command(self):
        m = self.master()
        r = self.replica(m.port)
        script = (b"set a 1 0 2\r\n10\r\nadd b 2 0 1\r\nx\r\nreplace a 3 0 2\r\n20\r\n"
                  b"append b 0 0 1\r\ny\r\nprepend b 0 0 1\r\nw\r\nincr a 5\r\ndecr a 1\r\n"
                  b"set t 4 0 1\r\nt\r\ntouch t 1000\r\ngat 2000 t\r\nset d 0 0 1\r\nd\r\n"
                  b"delete d\r\nset big 0 0 100000\r\n" + b"v" * 100000 + b"\r\n")
        with m.conn() as c:
            got = c.replies(script + b"gets a\r\n")
            self.assertTrue(got[-1].startswith(b"VALUE a 3 2 "), got)
            g = c.request(b"gets a\r\n").split()
            c.request(b"cas a 9 0 2 " + g[4] + b"\r\n30\r\n")
        wait_caught_up(m, r)
        keys = [b"a", b"b", b"t", b"d", b"big"]
        want = gets_all(m, keys)
        self.assertEqual(set(want), {b"a", b"b", b"t", b"big"})
        self.assertEqual(want[b"b"][1], b"wxy")
        self.assertEqual(gets_all(r, keys), want)
        with r.conn() as c:
            for cmd in (b"set z 0 0 1\r\nz\r\n", b"delete a\r\n", b"incr a 1\r\n",
                        b"touch a 10\r\n", b"flush_all\r\n", b"append a 0 0 1\r\nq\r\n"):
                self.assertEqual(c.request(cmd), READ_ONLY, cmd)
            self.assertEqual(c.request(b"get a\r\n"), b"VALUE a 9 2\r\n30\r\nEND\r\n")
        try:
            from pymemcache.client.base import Client
        except ImportError:
            self.skipTest(kuratest.missing("pymemcache (apt-get install python3-pymemcache)"))
        cl = Client(("127.0.0.1", r.port))
        self.assertEqual(cl.get("a"), b"30")
        cl.close()
        with m.conn() as c:
            self.assertEqual(c.request(b"flush_all\r\n"), b"OK\r\n")
        wait_caught_up(m, r)
        self.assertEqual(gets_all(r, keys), {})

    def test_chain(self):
        m = self.master()
        r1 = self.replica(m.port, "r1", 2)
        r2 = self.replica(r1.port, "r2", 3)
        with m.conn() as c:
            for i in range(50):
                self.assertEqual(c.request(b"set k%d 7 0 3\r\nv%02d\r\n" % (i, i)), b"STORED\r\n")
        wait_caught_up(m, r1)
        wait_caught_up(r1, r2)
        keys = [b"k%d" % i for i in range(50)]
        self.assertEqual(gets_all(r2, keys), gets_all(m, keys))
        mine = [(r["key"], r["origin_ts"]) for r in read_log(m.port) if r["type"] == PUT]
        theirs = read_log(r2.port)
        self.assertEqual([(r["key"], r["origin_ts"]) for r in theirs if r["type"] == PUT], mine)
        self.assertTrue(all(r["sid"] == 1 for r in theirs), "origin server id kept")
        self.assertTrue(all(r["ts"] > r["origin_ts"] for r in theirs), "own timestamps")

    def test_master_restart(self):
        m = self.master()
        r = self.replica(m.port)
        with m.conn() as c:
            c.request(b"set before 0 0 1\r\n1\r\n")
        wait_caught_up(m, r)
        m.kill9()
        m2 = self.master(port=m.port)
        with m2.conn() as c:
            self.assertEqual(c.request(b"get before\r\n"), b"VALUE before 0 1\r\n1\r\nEND\r\n")
            c.request(b"set after 0 0 1\r\n2\r\n")
        wait_caught_up(m2, r)
        self.assertEqual(set(gets_all(r, [b"before", b"after"])), {b"before", b"after"})
        with r.conn() as c:
            st = stats(c)
        self.assertGreaterEqual(int(st["repl_connects"]), 2)
        self.assertEqual(st["repl_copies_received"], "0")       # the log holds it all

    def test_cut_link(self):
        m = self.master()
        px = Proxy(m.port)
        self.addCleanup(px.close)
        r = self.replica(px.port)
        stop = threading.Event()
        errors = []

        def writer():
            try:
                with m.conn() as c:
                    c.request(b"set n 0 0 1\r\n0\r\n")
                    i = 0
                    while not stop.is_set() or i < 300:
                        c.request(b"set w%d 0 0 %d\r\n%d\r\n" % (i, len(b"%d" % i), i))
                        c.request(b"incr n 1\r\n")
                        i += 1
            except Exception as e:      # reported below
                errors.append(e)

        t = threading.Thread(target=writer)
        t.start()
        for _ in range(3):
            poll_until(lambda: px.accepted > _ and px.socks, timeout=20, what="a connection")
            with r.conn() as c:
                pos = int(stats(c)["repl_position"])
            poll_until(lambda: int(stats(r.conn())["repl_position"]) > pos, timeout=20,
                       what="rows to flow")
            px.cut()
        stop.set()
        t.join()
        self.assertEqual(errors, [])
        # the reconnect after the last cut: the replica may have had every
        # row before that cut, and then be caught up before it reconnects
        poll_until(lambda: int(stats(r.conn())["repl_connects"]) >= 4, timeout=40,
                   what="the replica's reconnect after the last cut")
        wait_caught_up(m, r, timeout=40)
        with m.conn() as c:
            n = c.request(b"get n\r\n")
        with r.conn() as c:
            self.assertEqual(c.request(b"get n\r\n"), n)
        keys = [b"w%d" % i for i in range(int(n.split(b"\r\n")[1]))]
        self.assertEqual(gets_all(r, keys), gets_all(m, keys))

    def test_bootstrap_data_before_ulog(self):
        m = self.master(ulog=False)
        with m.conn() as c:
            for i in range(300):
                c.request(b"set old%d 5 0 4\r\nv%03d\r\n" % (i, i))
        m.stop()
        m = self.master()           # the same database, now with an update log
        r = self.replica(m.port)
        with m.conn() as c:
            for i in range(50):
                c.request(b"set new%d 0 0 1\r\nn\r\n" % i)
        wait_caught_up(m, r)
        keys = [b"old%d" % i for i in range(300)] + [b"new%d" % i for i in range(50)]
        want = gets_all(m, keys)
        self.assertEqual(len(want), 350)
        self.assertEqual(gets_all(r, keys), want)
        with r.conn() as c:
            self.assertEqual(stats(c)["repl_copies_received"], "1")

    def test_copy_swapped_in_whole(self):
        """While a full copy arrives, the replica serves what it had; the
        copy replaces it only once complete (negative: applied as it came,
        some keys would already have their new value)."""
        m = self.master(args=["-ulim", "64k", "-ulmax", "192k"])
        px = Proxy(m.port)
        self.addCleanup(px.close)
        r = self.replica(px.port)
        with m.conn() as c:
            for i in range(200):
                c.request(b"set k%d 0 0 2\r\nv1\r\n" % i)
        wait_caught_up(m, r)
        r.stop()
        val = b"x" * 1000
        with m.conn() as c:
            for i in range(200):
                c.request(b"set k%d 0 0 %d\r\n%s\r\n" % (i, len(val), val))
            for i in range(400):
                c.request(b"set f%d 0 0 %d\r\n%s\r\n" % (i % 20, len(val), val))
            poll_until(lambda: int(stats(c)["ulog_pruned_needed"]) > 0, timeout=10,
                       what="the replica's rows pruned")
        px.hold_after(60000)                # about a quarter of the copy, then nothing
        r = self.replica(px.port)
        poll_until(lambda: stats(r.conn()).get("repl_copying") == "1", timeout=20,
                   what="the copy under way")
        keys = [b"k%d" % i for i in range(200)]
        got = gets_all(r, keys)
        self.assertEqual({v[1] for v in got.values()}, {b"v1"})
        self.assertEqual(len(got), 200)
        px.resume()
        wait_caught_up(m, r)
        self.assertEqual(gets_all(r, keys), gets_all(m, keys))
        self.assertEqual(digest_diff(m, r), set())
        self.assertFalse([f for f in os.listdir(self.dir) if f.startswith((".copy.", ".old."))])

    def test_swap_leftovers(self):
        """What a crash in the middle of a swap leaves is repaired at start:
        the old store without the new one is put back, an unfinished copy
        is removed, an old store beside the new one is removed."""
        m = self.master(ulog=False)
        with m.conn() as c:
            c.request(b"set kept 0 0 1\r\n1\r\n")
        m.stop()
        name = "m" + self.EXT[self.DB]
        path = os.path.join(self.dir, name)
        old, copy = os.path.join(self.dir, ".old." + name), os.path.join(self.dir, ".copy." + name)
        os.rename(path, old)
        os.mkdir(copy)
        open(os.path.join(copy, "junk"), "w").close()
        m = self.master(ulog=False)
        with m.conn() as c:
            self.assertEqual(c.request(b"get kept\r\n"), b"VALUE kept 0 1\r\n1\r\nEND\r\n")
        self.assertIn("putting", m.stderr())
        self.assertFalse(os.path.exists(copy) or os.path.exists(old))
        m.stop()
        shutil.copytree(path, old)
        m = self.master(ulog=False)
        self.assertFalse(os.path.exists(old))
        with m.conn() as c:
            self.assertEqual(c.request(b"get kept\r\n"), b"VALUE kept 0 1\r\n1\r\nEND\r\n")

    def test_chain_after_copy(self):
        """A replica that took a full copy makes its own replicas take one
        too (its log does not hold what the copy brought)."""
        m = self.master(args=["-ulim", "64k", "-ulmax", "192k"])
        r1 = self.replica(m.port, "r1", 2)
        r2 = self.replica(r1.port, "r2", 3)
        with m.conn() as c:
            c.request(b"set a 0 0 1\r\n1\r\n")
        wait_caught_up(m, r1)
        wait_caught_up(r1, r2)
        r1.stop()
        val = b"x" * 1000
        with m.conn() as c:
            for i in range(400):
                c.request(b"set f%d 0 0 %d\r\n%s\r\n" % (i % 20, len(val), val))
            c.request(b"delete a\r\n")
            poll_until(lambda: int(stats(c)["ulog_pruned_needed"]) > 0, timeout=10,
                       what="r1's rows pruned")
        r1 = self.replica(m.port, "r1", 2, port=r1.port)
        wait_caught_up(m, r1)
        poll_until(lambda: stats(r2.conn())["repl_copies_received"] == "1", timeout=30,
                   what="r2 sent a copy by r1")
        wait_caught_up(r1, r2)
        self.assertEqual(digest_diff(m, r2), set())

    def test_master_changed_without_log(self):
        """A master run once without -ulog (changes its log never saw): its
        replica gets a full copy, not a gap."""
        m = self.master()
        r = self.replica(m.port)
        with m.conn() as c:
            c.request(b"set k1 0 0 1\r\n1\r\n")
        wait_caught_up(m, r)
        m.stop()
        m = self.master(ulog=False, port=m.port)
        with m.conn() as c:
            c.request(b"set k2 0 0 1\r\n2\r\ndelete k1\r\n")
        m.stop()
        m = self.master(port=m.port)
        poll_until(lambda: gets_all(r, [b"k1", b"k2"]) == gets_all(m, [b"k1", b"k2"]),
                   timeout=30, what="the replica equal to its master")
        with r.conn() as c:
            self.assertEqual(stats(c)["repl_copies_received"], "1")

    def test_bootstrap_behind_cap(self):
        m = self.master(args=["-ulim", "64k", "-ulmax", "256k"])
        r = self.replica(m.port)
        with m.conn() as c:
            c.request(b"set gone 0 0 1\r\ng\r\nset stays 0 0 1\r\ns\r\n")
        wait_caught_up(m, r)
        r.stop()
        val = b"x" * 4000
        with m.conn() as c:
            c.request(b"delete gone\r\n")
            for i in range(400):            # 1.6 MB of rows: past the cap
                c.request(b"set f%d 0 0 %d\r\n%s\r\n" % (i % 50, len(val), val))
            poll_until(lambda: int(stats(c)["ulog_pruned_needed"]) > 0, timeout=10,
                       what="the replica's rows pruned")
        r = self.replica(m.port)            # the same database and rts file
        wait_caught_up(m, r)
        keys = [b"gone", b"stays"] + [b"f%d" % i for i in range(50)]
        self.assertEqual(gets_all(r, keys), gets_all(m, keys))
        with r.conn() as c:
            self.assertEqual(c.request(b"get gone\r\n"), b"END\r\n")
            self.assertEqual(stats(c)["repl_copies_received"], "1")

    def test_kill9_store_and_log_agree(self):
        for sync in ("interval", "always"):
            m = self.master(name="k" + sync, args=["-sync", sync])
            stop = threading.Event()
            done = [0] * 4

            def load(seed):
                rnd = random.Random(seed)
                try:
                    with m.conn() as c:
                        while not stop.is_set():
                            done[seed] += 1
                            k = b"k%d" % rnd.randrange(60)
                            op = rnd.randrange(4)
                            if op == 0:
                                c.send(b"delete " + k + b"\r\n")
                            elif op == 1:
                                c.send(b"incr " + k + b" 3\r\n")
                            else:
                                v = b"%d" % rnd.randrange(1000)
                                c.send(b"set %s %d 0 %d\r\n%s\r\n" % (k, op, len(v), v))
                            c.line()
                except Exception:
                    pass                    # the kill ends it

            ts = [threading.Thread(target=load, args=(i,)) for i in range(4)]
            for t in ts:
                t.start()
            poll_until(lambda: sum(done) > 3000, timeout=60, what="load")
            m.kill9()
            stop.set()
            for t in ts:
                t.join()
            m2 = self.master(name="k" + sync, args=["-sync", sync])
            state = {}
            for row in read_log(m2.port):
                if row["type"] == PUT:
                    state[row["key"]] = (row["flags"], row["value"], row["cas"])
                elif row["type"] == DEL:
                    state.pop(row["key"], None)
                elif row["type"] == FLUSH:
                    state.clear()
            keys = [b"k%d" % i for i in range(60)]
            self.assertEqual(gets_all(m2, keys), state, sync)
            m2.stop()

    def test_garbage_from_master(self):
        # a row that says it is 1 GB long: refused before it is buffered
        huge = struct.pack("<I", 0) + _put_var(1 << 30) + b"x" * 100
        for answer in (b"REPL 0 5\r\n" + bytes(range(256)) * 4, b"HELLO\r\n",
                       b"REPL 0 5\r\n" + huge):
            fake = FakeMaster(lambda n, line: answer)
            self.addCleanup(fake.close)
            r = self.replica(fake.port, name="g%d" % len(answer))
            poll_until(lambda: len(fake.asked) >= 3, timeout=20, what="reconnects with backoff")
            with r.conn() as c:
                self.assertEqual(c.request(b"get a\r\n"), b"END\r\n")
                self.assertEqual(stats(c)["repl_rows_applied"], "0")
            text = r.stderr()
            self.assertIn("refused: HELLO" if len(answer) < 20 else
                          "larger than this server takes" if answer.endswith(b"x" * 100) else
                          "does not decode", text)
            r.stop()
            fake.close()

    def test_master_line_escaped_in_log(self):
        """A master's refusal is logged with its control bytes escaped
        (issue 32: a peer's bytes never write raw into the log)."""
        fake = FakeMaster(lambda n, line: b"HELLO\x1b[2J\x7f\x9b\r\n")
        self.addCleanup(fake.close)
        r = self.replica(fake.port)
        poll_until(lambda: "refused: HELLO" in r.stderr(), timeout=20, what="the refusal logged")
        self.assertIn("refused: HELLO\\x1b[2J\\x7f\\x9b\n", r.stderr())
        self.assertNotIn("\x1b", r.stderr())

    def test_peer_disconnects_mid_row(self):
        """A master that dies in the middle of a row: the replica applies
        the whole rows only, reconnects from there, and gets the rest."""
        r1 = encode_put(1000 << 12, 5, b"first", b"1")
        r2 = encode_put(2000 << 12, 5, b"second", b"2" * 100)
        fake = FakeMaster(lambda n, line: b"REPL 0 5\r\n" + r1 + r2[:len(r2) // 2] if n == 0
                          else b"REPL %d 5\r\n" % (1000 << 12) + r2, hold=lambda n: n > 0)
        self.addCleanup(fake.close)
        r = self.replica(fake.port)
        poll_until(lambda: gets_all(r, [b"second"]), timeout=20, what="the rest after reconnecting")
        self.assertEqual(fake.asked[0].split()[:2], [b"repl", b"0"])
        self.assertEqual(fake.asked[1].split()[:2], [b"repl", b"%d" % (1000 << 12)])
        got = gets_all(r, [b"first", b"second"])
        self.assertEqual((got[b"first"][1], got[b"second"][1]), (b"1", b"2" * 100))
        # the replica's thread counts a row just after applying it: the
        # count may trail the item by a moment (polled), and is then exactly
        # the two whole rows (the fake master sends nothing more)
        with r.conn() as c:
            poll_until(lambda: int(stats(c)["repl_rows_applied"]) >= 2, timeout=10,
                       what="the second row counted")
            self.assertEqual(stats(c)["repl_rows_applied"], "2")

    def test_master_not_kurad(self):
        """A memcached as master: the replica logs its refusal, backs off,
        and serves reads."""
        if not os.access(kuratest.MEMCACHED, os.X_OK):
            self.skipTest(kuratest.missing("memcached (apt-get install memcached)"))
        mc = Server(kind="memcached")
        self.addCleanup(mc.stop)
        r = self.replica(mc.port)
        poll_until(lambda: "refused: ERROR" in r.stderr(), timeout=20, what="the refusal logged")
        with r.conn() as c:
            self.assertEqual(c.request(b"get k\r\n"), b"END\r\n")
            st = stats(c)
            self.assertEqual(st["repl_connected"], "0")

    def test_chain_kills_under_load(self):
        """master -> r1 -> r2 under a load of every command; r1 and r2 are
        killed with -9 and restarted, r1 is also stopped and continued; at
        the end all three hold the same items."""
        m = self.master()
        r1 = self.replica(m.port, "r1", 2)
        r2 = self.replica(r1.port, "r2", 3)
        stop = threading.Event()
        errors = []

        def load(seed):
            rnd = random.Random(seed)
            try:
                with m.conn() as c:
                    while not stop.is_set():
                        k = b"x%d" % rnd.randrange(80)
                        v = b"%d" % rnd.randrange(1000)
                        cmd = rnd.choice([
                            b"set %s 1 0 %d\r\n%s\r\n" % (k, len(v), v),
                            b"add %s 2 0 %d\r\n%s\r\n" % (k, len(v), v),
                            b"replace %s 3 0 %d\r\n%s\r\n" % (k, len(v), v),
                            b"append %s 0 0 1\r\na\r\n" % k,
                            b"prepend %s 0 0 1\r\np\r\n" % k,
                            b"incr %s 2\r\n" % k, b"decr %s 1\r\n" % k,
                            b"touch %s 3000\r\n" % k, b"gat 4000 %s\r\n" % k,
                            b"delete %s\r\n" % k])
                        c.request(cmd)
            except Exception as e:
                errors.append(e)

        ts = [threading.Thread(target=load, args=(i,)) for i in range(3)]
        for t in ts:
            t.start()
        try:
            poll_until(lambda: int(stats(r2.conn())["repl_rows_applied"]) > 300, timeout=30,
                       what="rows through the chain")
            r2.kill9()
            r2 = self.replica(r1.port, "r2", 3)
            r1.kill9()
            r1 = self.replica(m.port, "r1", 2, port=r1.port)
            poll_until(lambda: stats(r2.conn()).get("repl_connected") == "1", timeout=30,
                       what="r2 following r1 again")
            os.kill(r1.proc.pid, 19)                # SIGSTOP
            poll_until(lambda: int(stats(m.conn())["ulog_last_ts"]) > 0, timeout=5)
            with m.conn() as c:
                n0 = int(stats(c)["cmd_set"])
            poll_until(lambda: int(stats(m.conn())["cmd_set"]) > n0 + 200, timeout=30,
                       what="writes while r1 is stopped")
            os.kill(r1.proc.pid, 18)                # SIGCONT
        finally:
            stop.set()
            for t in ts:
                t.join()
        self.assertEqual(errors, [])
        wait_caught_up(m, r1, timeout=60)
        wait_caught_up(r1, r2, timeout=60)
        self.assertEqual(digest_diff(m, r1), set())
        self.assertEqual(digest_diff(m, r2), set())
        self.assertEqual(len(digest_diff(m, r2, 8) | set()), 0)

    def test_torn_log(self):
        m = self.master()
        with m.conn() as c:
            for i in range(20):
                c.request(b"set t%d 0 0 5\r\nvalue\r\n" % i)
        m.stop()
        seg = os.path.join(self.dir, "m.ul", "00000001.seg")
        size = os.path.getsize(seg)
        with open(seg, "r+b") as f:
            f.truncate(size - 3)
        m = self.master()
        self.assertRegex(m.stderr(), r"cut|torn|lost")
        with m.conn() as c:
            self.assertEqual(c.request(b"set after 0 0 1\r\n1\r\n"), b"STORED\r\n")
        rows = read_log(m.port)
        self.assertEqual([r["key"] for r in rows if r["type"] == PUT][-1], b"after")

    def dual(self):
        """Two servers, each the -rw replica of the other through a proxy."""
        pa, pb = kuratest.free_port(), kuratest.free_port()
        to_a, to_b = Proxy(pa), Proxy(pb)
        self.addCleanup(to_a.close)
        self.addCleanup(to_b.close)
        da, db = os.path.join(self.dir, "a"), os.path.join(self.dir, "b")
        a = Server(db=self.db(da), port=pa, kura_args=["-sid", "1", "-ulog", da + ".ul", "-rw",
                                                      "-mhost", "127.0.0.1", "-mport",
                                                      str(to_b.port)])
        self.addCleanup(a.stop, check=False)
        b = Server(db=self.db(db), port=pb, kura_args=["-sid", "2", "-ulog", db + ".ul", "-rw",
                                                      "-mhost", "127.0.0.1", "-mport",
                                                      str(to_a.port)])
        self.addCleanup(b.stop, check=False)
        wait_caught_up(a, b)
        wait_caught_up(b, a)
        return a, b, (to_a, to_b)

    def test_dual_master_conflicts(self):
        """Changes made on both while the links hold them: the later wins on
        both, a delete included (negative check: without the ordering, each
        would end with the other's change)."""
        a, b, links = self.dual()
        with a.conn() as ca, b.conn() as cb:
            ca.request(b"set d2 0 0 1\r\nx\r\nset d1 0 0 1\r\nx\r\n")
            wait_caught_up(a, b)
            for px in links:
                px.pause()
            ca.request(b"set s 1 0 5\r\nfromA\r\n")
            ca.request(b"delete d1\r\n")
            ca.request(b"set d2 1 0 5\r\nfromA\r\n")
            ca.request(b"set n 0 0 1\r\n5\r\n")
            time.sleep(0.002)           # the clocks' order, not synchronisation
            cb.request(b"set s 2 0 5\r\nfromB\r\n")     # later: wins
            cb.request(b"set d1 2 0 5\r\nfromB\r\n")    # after A's delete: stays
            cb.request(b"delete d2\r\n")                  # after A's set: gone
            cb.request(b"set n 0 0 1\r\n1\r\nincr n 1\r\n")
            for px in links:
                px.resume()
        wait_caught_up(a, b)
        wait_caught_up(b, a)
        keys = [b"s", b"d1", b"d2", b"n"]
        got = gets_all(a, keys)
        self.assertEqual(got, gets_all(b, keys))
        self.assertEqual({k: v[1] for k, v in got.items()},
                         {b"s": b"fromB", b"d1": b"fromB", b"n": b"2"})

    def test_dual_master(self):
        a, b, _ = self.dual()
        with a.conn() as c:
            self.assertEqual(c.request(b"set fromA 0 0 1\r\na\r\n"), b"STORED\r\n")
        with b.conn() as c:
            self.assertEqual(c.request(b"set fromB 0 0 1\r\nb\r\n"), b"STORED\r\n")
        keys = [b"fromA", b"fromB"]
        poll_until(lambda: len(gets_all(a, keys)) == 2 and len(gets_all(b, keys)) == 2,
                   timeout=20, what="both keys on both")
        self.assertEqual(gets_all(a, keys), gets_all(b, keys))
        poll_until(lambda: int(stats(a.conn())["repl_rows_own_skipped"]) >= 1, timeout=20,
                   what="A's own change coming back, skipped")

        # concurrent changes of the same keys on both: they converge
        def load(server, seed):
            rnd = random.Random(seed)
            with server.conn() as c:
                for burst in range(60):         # pipelined: changes cross in flight
                    batch = []
                    for i in range(50):
                        k = b"c%d" % rnd.randrange(6)
                        op = rnd.randrange(5)
                        if op == 0:
                            batch.append(b"delete " + k + b" noreply\r\n")
                        elif op == 1:
                            batch.append(b"incr " + k + b" 1 noreply\r\n")
                        elif op == 2:
                            batch.append(b"touch " + k + b" 5000 noreply\r\n")
                        else:
                            v = b"%d" % rnd.randrange(100)
                            batch.append(b"set %s %d 0 %d noreply\r\n%s\r\n"
                                         % (k, seed, len(v), v))
                    c.request(b"".join(batch) + b"version\r\n")

        ts = [threading.Thread(target=load, args=(x, i)) for i, x in enumerate((a, b))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wait_caught_up(a, b)
        wait_caught_up(b, a)
        keys = [b"c%d" % i for i in range(6)]
        got_a = gets_all(a, keys)
        self.assertEqual(got_a, gets_all(b, keys))
        self.assertGreater(len(got_a), 0)

    def test_syncrepl(self):
        """-syncrepl 1: a reply comes once the replica has the row (so a read
        there right after sees it); a replica that holds back: the connection
        closes unanswered, and later changes go on."""
        # the timeout must outlast a replica's ack through the Python proxy
        # on a loaded machine under a sanitizer (each of the 20 sets below
        # waits for one), but stay below the replica's 10 s silence limit,
        # which the paused link would otherwise reach while "held" waits
        m = self.master(args=["-syncrepl", "1", "-syncrepl-timeout", str(SYNCREPL_TIMEOUT_MS)])
        px = Proxy(m.port)
        self.addCleanup(px.close)
        r = self.replica(px.port)
        poll_until(lambda: stats(r.conn()).get("repl_connected") == "1", timeout=20,
                   what="the replica connected")
        with m.conn() as c, r.conn() as rc:
            for i in range(20):
                self.assertEqual(c.request(b"set k%d 0 0 1\r\n%d\r\n" % (i, i % 10)),
                                 b"STORED\r\n")
                self.assertEqual(rc.request(b"get k%d\r\n" % i),
                                 b"VALUE k%d 0 1\r\n%d\r\nEND\r\n" % (i, i % 10))
        px.pause()
        with m.conn() as c:
            c.send(b"set held 0 0 1\r\nh\r\n")
            self.assertTrue(c.is_closed(timeout=10), "closed without a reply")
        with m.conn() as c:
            self.assertEqual(int(stats(c)["repl_syncrepl_timeouts"]), 1)
            self.assertEqual(c.request(b"get k1\r\n"), b"VALUE k1 0 1\r\n1\r\nEND\r\n")
        px.resume()
        with m.conn() as c, r.conn() as rc:
            self.assertEqual(c.request(b"set after 0 0 1\r\na\r\n"), b"STORED\r\n")
            self.assertEqual(rc.request(b"get after\r\n"), b"VALUE after 0 1\r\na\r\nEND\r\n")
        self.assertIn("did not confirm", m.stderr())

    def test_syncrepl_ack(self):
        m = self.master(args=["-syncrepl", "1", "-syncrepl-timeout", "100",
                              "-syncrepl-fail", "ack"])
        with m.conn() as c:
            self.assertEqual(c.request(b"set k 0 0 1\r\n1\r\n"), b"STORED\r\n")
            self.assertEqual(int(stats(c)["repl_syncrepl_timeouts"]), 1)
        self.assertIn("acknowledged anyway", m.stderr())

    def test_digest_and_stats(self):
        """digest names exactly the keys that differ; stats repl says who is who."""
        m = self.master()
        r = self.replica(m.port)
        with m.conn() as c:
            for i in range(500):
                c.request(b"set d%d %d 0 2\r\nvv\r\n" % (i, i))
        wait_caught_up(m, r)
        self.assertEqual(digest_diff(m, r), set())
        self.assertEqual(len(digest(m)), 64)
        self.assertEqual(sum(int(ln.split()[2]) for ln in digest(m)), 500)
        with m.conn() as c:
            st = stats(c, b"repl")
            self.assertEqual(st["repl_role"], "master")
            self.assertRegex(st["repl_replica_2"], r"^127\.0\.0\.1:%d,state=streaming,acked=\d+,"
                             r"sent=\d+,lag_rows=\d+,lag_us=\d+$" % r.port)
            self.assertNotIn("repl_role", stats(c))         # the general list: numbers only
            self.assertEqual(c.request(b"digest 0\r\n"), b"CLIENT_ERROR bad command line format\r\n")
            self.assertEqual(c.request(b"digest 4 4\r\n"), b"CLIENT_ERROR bad command line format\r\n")
            # a key list is bounded (1 MiB): past it, an error, not the list
            long = b"L" * 200
            c.send(b"".join(b"set %s%d 0 0 1 noreply\r\nx\r\n" % (long, i) for i in range(6000)))
            self.assertEqual(c.request(b"digest 1 0\r\n"),
                             b"SERVER_ERROR bucket too large: ask for more buckets\r\n")
            keys = digest(m, 64, 3)
            self.assertTrue(keys and all(k.startswith(b"KEY ") for k in keys))
        with r.conn() as c:
            st = stats(c, b"repl")
            self.assertEqual(st["repl_role"], "replica")
            self.assertEqual(st["repl_master"], "127.0.0.1:%d" % m.port)
            # the lag is known once the master's heartbeat told its newest
            # row, and 0 once the replica holds it (the 6000 sets above may
            # still be on their way: under a sanitizer a heartbeat can come
            # first, and an honest lag is then above 0)
            poll_until(lambda: stats(c, b"repl")["repl_lag_seconds"] != "unknown", timeout=10,
                       what="a heartbeat")
            wait_caught_up(m, r)
            poll_until(lambda: stats(c, b"repl")["repl_lag_seconds"] == "0.000", timeout=10,
                       what="lag 0 once caught up")
        r.stop()
        with m.conn() as c:
            c.request(b"set d7 0 0 1\r\nx\r\ndelete d8\r\nset new 0 0 1\r\nn\r\ntouch d9 100\r\n")
        alone = Server(db=self.db(os.path.join(self.dir, "r")))    # the replica's data, alone
        self.addCleanup(alone.stop)
        long = {k for k in digest_diff(m, alone) if k.startswith(b"L")}
        self.assertEqual(digest_diff(m, alone) - long, {b"d7", b"d8", b"new", b"d9"})

    def test_repl_command(self):
        m = self.master(ulog=False)
        with m.conn() as c:
            self.assertEqual(c.request(b"repl 0 2\r\n"), b"SERVER_ERROR this server keeps no "
                             b"update log (start it with -ulog DIR)\r\n")
        m2 = self.master(name="m2")
        with m2.conn() as c:
            self.assertEqual(c.request(b"repl x 2\r\n"), b"CLIENT_ERROR bad command line format\r\n")
            self.assertEqual(c.request(b"repl 1\r\n"), b"ERROR\r\n")
            self.assertEqual(c.request(b"get a\r\n"), b"END\r\n")


@kura_only
class ReplicationTree(Replication):
    """The same on the B+ tree."""
    DB = "tree"


@kura_only
class ReplicationCache(Replication):
    """The same on the in-memory cache (rebuilt from its update log at start)."""
    DB = "cache"


# what does not depend on a store that persists by itself
CACHE_TESTS = {"test_every_command", "test_chain", "test_master_restart", "test_cut_link",
               "test_dual_master", "test_dual_master_conflicts", "test_syncrepl",
               "test_kill9_store_and_log_agree", "test_chain_kills_under_load"}
for _name in list(vars(Replication)):
    if _name.startswith("test_") and _name not in CACHE_TESTS:
        setattr(ReplicationCache, _name, None)      # not collected

# tests/run runs this file once per backend (KURA_DB), each run the class
# of that backend, so the three run side by side; run by hand without
# KURA_DB, it runs all three
_BY_DB = {"hash": "Replication", "tree": "ReplicationTree", "cache": "ReplicationCache"}
if os.environ.get("KURA_DB") in _BY_DB:
    for _db, _cls in _BY_DB.items():
        if _db != os.environ["KURA_DB"]:
            del globals()[_cls]

if __name__ == "__main__":
    kuratest.main()
