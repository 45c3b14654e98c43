#!/usr/bin/python3
# kura-test: once
"""test_watch.py - "watch" (memcached 1.6's log stream): docs/protocol.md.

  Framing     memcached 1.6.18 and kurad, each watched with "watch fetchers
              mutations evictions connevents" while one client runs the same
              commands: "OK\\r\\n", then lines ending in "\\n" whose layout
              is memcached's (ts=<sec>.<usec> gid=<n> type=..., the same
              field names in the same order for item_get, item_store,
              eviction, conn_new and conn_close) and whose type, key
              (uriencoded), status and cmd are the same once memcached's
              own lookups before a store are left out (the one documented
              difference).
  Words       "watch" alone (fetchers only), unknown or upper-case words
              (ERROR), the 21st watcher (WATCHER_TOO_MANY ...): the same
              bytes from both; a closed watcher gives its connection back.
  Bound       a watcher that does not read loses lines and is told how many
              ("skipped=N", memcached's line, before the next line that
              fits): the lines it got plus N are every event; meanwhile a
              watcher that reads gets every line without a skipped line and
              the client doing the work is answered throughout (the
              negative: the reading watcher shows the skip comes from the
              slowness).
  Input       what a watcher sends afterwards (commands, a megabyte of
              garbage) is dropped: its stream goes on, nothing is run.
  Auth        with -Y, "watch" is behind the gate like every command.
  Long keys   a key past memcached's 250 (Tokyo Tyrant's put, up to -kmax)
              comes whole in its item_store and item_get lines (the
              negative: its 1000 and 4096 bytes, cut at 3 * 250 encoded
              bytes before, would not).
"""
import os, re, socket, struct, sys, time, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, poll_until, kura_only, stats

ALL = b"watch fetchers mutations evictions connevents\r\n"
HEAD = re.compile(rb"^ts=\d+\.\d{1,6} gid=\d+ type=([a-z_]+) ")


class Watcher:
    def __init__(self, port, cmd=ALL, rcvbuf=None):
        self.s = socket.socket()
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.connect(("127.0.0.1", port))
        self.s.settimeout(10 * kuratest.SCALE)
        self.s.sendall(cmd)
        self.buf = b""

    def first(self, n):
        while len(self.buf) < n:
            got = self.s.recv(65536)
            if not got:
                break
            self.buf += got
        head, self.buf = self.buf[:n], self.buf[n:]
        return head

    def lines_until(self, pred, timeout=10, into=None):
        """Whole lines read until one satisfies pred (that one included),
        appended to into (kept there if the wait times out)."""
        out = [] if into is None else into
        end = time.monotonic() + timeout * kuratest.SCALE
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                out.append(line)
                if pred(line):
                    return out
            self.s.settimeout(max(0.01, end - time.monotonic()))
            got = self.s.recv(65536)
            if not got:
                raise AssertionError("watcher closed; got %r" % out[-3:])
            self.buf += got

    def close(self):
        self.s.close()


def fields(line):
    return [f.split(b"=", 1)[0] for f in line.split(b" ")]


def value(line, name):
    for f in line.split(b" "):
        if f.startswith(name + b"="):
            return f[len(name) + 1:]
    return None


COMMANDS = [b"set foo 5 0 3\r\nbar\r\n", b"get foo\r\n", b"get nope\r\n", b"gets foo\r\n",
            b"touch foo 100\r\n", b"add foo 0 0 1\r\nx\r\n", b"replace nope 0 0 1\r\nx\r\n",
            b"append foo 0 0 1\r\n2\r\n", b"prepend foo 0 0 1\r\n0\r\n",
            b"cas foo 0 0 1 999\r\nz\r\n", b"mg foo v\r\n", b"ms m 1\r\nx\r\n",
            b"get a\xffb/c%d\r\n", b"mg YWJj b v\r\n", b"incr nope 1\r\n", b"get last\r\n"]


class Watch(unittest.TestCase):

    def setUp(self):
        if kuratest.is_memcached():
            self.skipTest(kuratest.not_applicable("compares kurad with memcached"))

    def pair(self, **kw):
        ref = Server(kind="memcached", memory_mb=2, **kw)
        self.addCleanup(ref.stop)
        dut = Server(kind="kurad", memory_mb=2, db="*", **kw)
        self.addCleanup(dut.stop)
        return ref, dut

    def run_session(self, srv):
        w = Watcher(srv.port)
        self.assertEqual(w.first(4), b"OK\r\n", srv.kind)
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as c:
            mine = b"%d" % c.getsockname()[1]
            for cmd in COMMANDS:
                c.sendall(cmd)
                c.recv(65536)           # one reply each (all short)
            # evictions: 2 MB of 100 KB values on a 2 MB server
            for i in range(40):
                c.sendall(b"set big%d 0 0 100000 noreply\r\n%s\r\n" % (i, b"v" * 100000))
            c.sendall(b"get last\r\n")
            c.recv(65536)
        # until this connection's close: another's (the harness's readiness
        # probe, closed at the server's start) may be logged first on a
        # loaded machine
        lines = w.lines_until(lambda l: b"type=conn_close" in l and value(l, b"rport") == mine)
        w.close()
        return lines

    @staticmethod
    def without_store_lookups(lines):
        """memcached's lines less the item_get it logs for a store's own
        lookup of the old item (kura logs the store alone)."""
        out = []
        for i, l in enumerate(lines):
            nxt = lines[i + 1] if i + 1 < len(lines) else b""
            if b"type=item_get" in l and b"type=item_store" in nxt and \
                    value(l, b"key") == value(nxt, b"key"):
                continue
            out.append(l)
        return out

    def test_framing_as_memcached(self):
        ref, dut = self.pair()
        got = {s.kind: self.run_session(s) for s in (ref, dut)}
        layouts = {}
        for kind, lines in got.items():
            for l in lines:
                m = HEAD.match(l)
                self.assertTrue(m, (kind, l))
                self.assertNotIn(b"\r", l)
                layouts.setdefault(kind, {}).setdefault(m.group(1), fields(l))
        for t in (b"item_get", b"item_store", b"eviction", b"conn_new", b"conn_close"):
            self.assertIn(t, layouts["kurad"], (t, got["kurad"]))
            self.assertEqual(layouts["memcached"][t], layouts["kurad"][t], t)

        def summary(lines):
            return [tuple(value(l, f) for f in (b"type", b"key", b"status", b"cmd"))
                    for l in lines if b"type=eviction" not in l and b"key=big" not in l]
        self.assertEqual(summary(self.without_store_lookups(got["memcached"])),
                         summary(got["kurad"]))
        self.assertIn((b"item_get", b"a%FFb%2Fc%25d", b"not_found", None), summary(got["kurad"]))
        ev = {value(l, b"key"): l for l in got["kurad"] if b"type=eviction" in l}
        big = [l for k, l in ev.items() if k.startswith(b"big")]     # the cache's LRU
        self.assertTrue(big, ev)                                      # is per stripe
        self.assertEqual((value(big[0], b"fetch"), value(big[0], b"ttl"),
                          value(big[0], b"size")), (b"no", b"-1", b"100000"))

    def test_words_as_memcached(self):
        ref, dut = self.pair()
        for srv in (ref, dut):
            for bad in (b"watch bogus\r\n", b"watch FETCHERS\r\n", b"watch fetchers nope\r\n"):
                with srv.conn(timeout=10) as c:
                    self.assertEqual(c.request(bad), b"ERROR\r\n", (srv.kind, bad))
            w = Watcher(srv.port, b"watch\r\n")     # fetchers only
            self.assertEqual(w.first(4), b"OK\r\n")
            with srv.conn(timeout=10) as c:
                c.request(b"set k 0 0 1\r\n1\r\n")
                c.request(b"get k\r\n")
            lines = w.lines_until(lambda l: b"type=item_get" in l and b"status=found" in l)
            self.assertFalse([l for l in lines if b"item_store" in l], (srv.kind, lines))
            w.close()
        for srv in (ref, dut):
            ws = [Watcher(srv.port, b"watch\r\n") for _ in range(20)]
            for w in ws:
                self.assertEqual(w.first(4), b"OK\r\n", srv.kind)
            extra = Watcher(srv.port, b"watch\r\n")
            self.assertEqual(extra.first(44), b"WATCHER_TOO_MANY log watcher limit reached\r\n")
            for w in ws + [extra]:
                w.close()
        # a closed watcher's connection is counted no more
        with dut.conn() as c:
            poll_until(lambda: stats(c)["curr_connections"] == "1", timeout=10,
                       what="watchers' connections given back")   # this one

    @kura_only
    def test_slow_watcher_bounded(self):
        s = Server(kind="kurad", db="*")
        self.addCleanup(s.stop)
        slow = Watcher(s.port, b"watch\r\n", rcvbuf=4096)
        fast = Watcher(s.port, b"watch\r\n")
        self.assertEqual(slow.first(4), b"OK\r\n")
        self.assertEqual(fast.first(4), b"OK\r\n")
        n, key = 12000, b"k" * 200                # ~290 bytes a line: 3.5 MB in all
        got_fast = []

        def count_to(m):
            return lambda l: (got_fast.append(l) or True) and len(got_fast) == m

        with socket.create_connection(("127.0.0.1", s.port), timeout=20) as c:
            batch = b"get %s\r\n" % key * 500
            for i in range(n // 500):
                c.sendall(batch)
                replies = b""
                while replies.count(b"END\r\n") < 500:
                    replies += c.recv(65536)
                # the fast watcher reads each batch's lines as they come
                fast.lines_until(count_to((i + 1) * 500), timeout=30)
            # the slow one now reads: what it kept, then skipped=N before the
            # next line that fits; "get after" until one does (those that do
            # not are skipped and counted too)
            lines, attempts = [], 0
            while not [l for l in lines if b"key=after" in l]:
                self.assertLess(attempts, 200, lines[-3:])
                attempts += 1
                c.sendall(b"get after\r\n")
                self.assertEqual(c.recv(100), b"END\r\n")
                try:
                    slow.lines_until(lambda l: b"key=after" in l, timeout=0.5, into=lines)
                except (TimeoutError, socket.timeout):
                    pass
        self.assertEqual(len(got_fast), n)
        self.assertFalse([l for l in got_fast if l.startswith(b"skipped=")])
        skipped = [int(l.split(b"=")[1]) for l in lines if l.startswith(b"skipped=")]
        k = sum(skipped)
        self.assertGreater(k, 0)
        kept = [l for l in lines if b"type=item_get" in l and b"key=kkk" in l]
        after = [l for l in lines if b"key=after" in l]
        self.assertEqual(len(kept) + len(after) + k, n + attempts)
        self.assertTrue(lines[-2].startswith(b"skipped="), lines[-2:])
        kept_bytes = sum(len(l) + 1 for l in kept)
        print("# slow watcher: %d of %d lines kept (%d bytes), %d skipped" %
              (len(kept), n, kept_bytes, k), flush=True)
        # what it kept is bounded: the ring, one chunk and the sockets' buffers
        self.assertLess(kept_bytes, 2 << 20)

    @kura_only
    def test_watcher_input_dropped(self):
        """What a watcher sends after "watch" is read and dropped (memcached
        ignores it): a megabyte of garbage neither stops its stream nor
        reaches the command table."""
        s = Server(kind="kurad", db="*")
        self.addCleanup(s.stop)
        w = Watcher(s.port, b"watch mutations\r\n")
        self.assertEqual(w.first(4), b"OK\r\n")
        w.s.sendall(b"flush_all\r\nset x 0 0 1\r\n1\r\n" + bytes(range(256)) * 4096)
        with s.conn() as c:
            self.assertEqual(c.request(b"set k 0 0 1\r\n1\r\n"), b"STORED\r\n")
            lines = w.lines_until(lambda l: b"key=k " in l)
            self.assertFalse([l for l in lines if b"key=x " in l], lines)
            self.assertEqual(c.request(b"get k\r\n"), b"VALUE k 0 1\r\n1\r\nEND\r\n")
        w.close()

    @kura_only
    def test_long_keys_whole(self):
        s = Server(kind="kurad", db="*", kura_args=["-kmax", "4096"])
        self.addCleanup(s.stop)
        w = Watcher(s.port, b"watch fetchers mutations\r\n")
        self.assertEqual(w.first(4), b"OK\r\n")
        with s.conn() as c:
            for n in (1000, 4096):
                key = b"w%d:" % n + b"/" * (n - 6) + b"!"
                key = key[:n]
                c.send(b"\xc8\x10" + struct.pack(">II", len(key), 1) + key + b"v")
                self.assertEqual(c.recv_exact(1), b"\x00")
                c.send(b"\xc8\x30" + struct.pack(">I", len(key)) + key)
                self.assertEqual(c.recv_exact(1 + 4 + 1), b"\x00" + struct.pack(">I", 1) + b"v")
                enc = b"".join(bytes([b]) if chr(b).isalnum() else b"%%%02X" % b for b in key)
                lines = w.lines_until(lambda l: b"type=item_get" in l)
                store = [l for l in lines if b"type=item_store" in l]
                self.assertEqual([value(l, b"key") for l in store], [enc], n)
                self.assertEqual(value(lines[-1], b"key"), enc, n)
        w.close()

    @kura_only
    def test_behind_auth(self):
        path = os.path.join(Server(kind="kurad", start=False).tmpdir, "users")
        with open(path, "w") as f:
            f.write("alice:secret\n")
        s = Server(kind="kurad", kura_args=["-Y", path])
        self.addCleanup(s.stop)
        with s.conn() as c:
            self.assertEqual(c.request(b"watch\r\n"), b"CLIENT_ERROR unauthenticated\r\n")
        w = Watcher(s.port, b"set a 0 0 12\r\nalice secret\r\nwatch\r\n")
        self.assertEqual(w.first(12), b"STORED\r\nOK\r\n")
        w.close()


if __name__ == "__main__":
    kuratest.main()
