#!/usr/bin/python3
# kura-test: once
"""test_stats_compat.py - the memcached stats that were empty, against
memcached 1.6 (/usr/bin/memcached) byte for byte.

  Detail      "stats detail on|off|dump" after the same requests on both
              (text get/gets/gat/gats, storage commands, delete found or not,
              and what memcached does not count: keys without the delimiter,
              meta commands, incr, touch): the dumps equal byte for byte, in
              memcached's order (several prefixes, so its hash order is
              checked); off keeps the counts, stats reset clears them; the
              usage error; -D with another delimiter (and counting on from
              the start); stats settings' detail_enabled and stat_key_prefix.
  Bound       past 10000 prefixes no new one is kept (kura_detail_dropped
              counts them); memcached keeps all (the property is kura's).
  Binary      the binary protocol's stat groups dispatched as memcached's:
              "settingsX", "resetX", "detail on", "detail dump" (one packet
              "detailed" holding the dump), "detailX", "conns", "itemsX";
              packets equal byte for byte except the settings' values.
  Conns       "stats conns": the same fields per socket, in the same order
              (listener first, then each connection by descriptor), the same
              states for an idle connection, one with a partial request, and
              the asking one; addresses are the real ones.
  binding_protocol is auto-negotiate (text and binary on one port).
"""
import os, re, socket, struct, sys, time, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, stats

SKIP = kuratest.is_memcached()

DETAIL_SCRIPT = [
    b"stats detail\r\n",
    b"stats detail dump\r\n",
    b"stats detail on\r\n",
    b"set a:1 0 0 1\r\nx\r\n",
    b"add a:1 0 0 1\r\nx\r\n",
    b"set nodelim 0 0 1\r\nx\r\n",
    b"get a:1 a:2 nodelim b:1\r\n",
    b"gets a:1 user:7 user:8\r\n",
    b"set user:7 0 0 2\r\nhi\r\n",
    b"gat 0 user:7 b:2\r\n",
    b"gats 0 session:x\r\n",
    b"delete a:1\r\n",
    b"delete zz:9\r\n",
    b"incr c:1 1\r\n",
    b"touch a:2 10\r\n",
    b"mg user:7 v\r\n",
    b"ms q:1 1\r\nx\r\n",
    b"md q:1\r\n",
    b"append user:7 0 0 1\r\n!\r\n",
    b"set :leading 0 0 1\r\nx\r\n",
    b"set long" + b"p" * 200 + b":k 0 0 1\r\nx\r\n",
    b"stats detail dump\r\n",
    b"stats detail off\r\n",
    b"get a:3\r\n",
    b"stats detail dump\r\n",
    b"stats detail x\r\n",
    b"stats detail on off\r\n",
    b"stats detail dump extra\r\n",
    b"stats reset\r\n",
    b"stats detail dump\r\n",
]


def transcript(server, steps):
    """Each step's reply bytes, in order, on one connection."""
    out = []
    with server.conn(timeout=10) as c:
        for s in steps:
            out.append(c.transcript(s))
    return out


def bin_stat(c, key):
    """The packets answering a binary stat request, up to the terminating
    empty one (or an error)."""
    c.send(struct.pack(">BBHBBHIIQ", 0x80, 0x10, len(key), 0, 0, 0, len(key), 7, 0) + key)
    out = []
    while True:
        h = c.recv_exact(24)
        body = c.recv_exact(struct.unpack(">I", h[8:12])[0])
        out.append(h + body)
        status = struct.unpack(">H", h[6:8])[0]
        if status != 0 or len(body) == 0:
            return out


def bin_request(c, op, key, extras=b"", value=b""):
    c.send(struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), 0, 0,
                       len(key) + len(extras) + len(value), 0, 0) + extras + key + value)
    h = c.recv_exact(24)
    return h + c.recv_exact(struct.unpack(">I", h[8:12])[0])


class StatsCompat(unittest.TestCase):

    def setUp(self):
        if SKIP:
            self.skipTest(kuratest.not_applicable("memcached against itself"))

    def pair(self, mc_args=(), kura_args=()):
        ref = Server(kind="memcached", mc_args=list(mc_args))
        self.addCleanup(ref.stop)
        dut = Server(kind="kurad", kura_args=list(kura_args))
        self.addCleanup(dut.stop)
        return ref, dut

    def test_detail_dump_byte_for_byte(self):
        ref, dut = self.pair()
        a, b = transcript(ref, DETAIL_SCRIPT), transcript(dut, DETAIL_SCRIPT)
        for i, (x, y) in enumerate(zip(a, b)):
            self.assertEqual(x, y, "step %d %r" % (i, DETAIL_SCRIPT[i][:60]))
        # the dump has several prefixes: the order is memcached's hash order
        dump = a[DETAIL_SCRIPT.index(b"stats detail dump\r\n", 3)]
        self.assertGreaterEqual(dump.count(b"PREFIX "), 5, dump)
        self.assertEqual(a[-1], b"END\r\n", "stats reset clears the counts")

    def test_delimiter_option(self):
        ref, dut = self.pair(mc_args=["-D", "/"], kura_args=["-D", "/"])
        steps = [b"set a/1 0 0 1\r\nx\r\n", b"set a:1 0 0 1\r\nx\r\n", b"get a/1 b/2 a:1\r\n",
                 b"delete x/y/z\r\n", b"stats detail dump\r\n"]
        a, b = transcript(ref, steps), transcript(dut, steps)
        self.assertEqual(a, b)
        self.assertIn(b"PREFIX a get 1 hit 1 set 1 del 0\r\n", b[-1], "on from the start with -D")
        for s in (ref, dut):
            with s.conn() as c:
                st = stats(c, b"settings")
                self.assertEqual((st["detail_enabled"], st["stat_key_prefix"]), ("yes", "/"))
        with dut.conn() as c:
            self.assertEqual(stats(c, b"settings")["binding_protocol"], "auto-negotiate")
        with ref.conn() as c:
            self.assertEqual(stats(c, b"settings")["binding_protocol"], "auto-negotiate")

    def test_detail_bound(self):
        """kura keeps at most 10000 prefixes; the keys of any more are
        counted as dropped (the negative: 10000 are all kept)."""
        if kuratest.is_memcached():
            self.skipTest(kuratest.not_applicable("kura's bound"))
        s = Server(kind="kurad", kura_args=["-D", ":"])
        self.addCleanup(s.stop)
        with s.conn(timeout=30) as c:
            c.send(b"".join(b"delete p%d:k noreply\r\n" % i for i in range(10000)))
            self.assertEqual(c.request(b"version\r\n")[:8], b"VERSION ")
            self.assertEqual(stats(c)["kura_detail_dropped"], "0")
            dump = c.transcript(b"stats detail dump\r\n")
            self.assertEqual(dump.count(b"PREFIX "), 10000)
            c.send(b"".join(b"delete q%d:k noreply\r\n" % i for i in range(50)))
            c.send(b"delete p5:k noreply\r\n")      # a known prefix is still counted
            self.assertEqual(c.request(b"version\r\n")[:8], b"VERSION ")
            self.assertEqual(stats(c)["kura_detail_dropped"], "50")
            dump = c.transcript(b"stats detail dump\r\n")
            self.assertEqual(dump.count(b"PREFIX "), 10000)
            self.assertIn(b"PREFIX p5 get 0 hit 0 set 0 del 2\r\n", dump)
            self.assertNotIn(b"PREFIX q", dump)

    def test_binary_stat_groups(self):
        ref, dut = self.pair()
        keys = [b"detail dump", b"detail on", b"detailX", b"detail", b"conns", b"itemsX",
                b"nope", b"sizes", b"detail onX"]
        got = []
        for s in (ref, dut):
            with s.conn(timeout=10) as c:
                res = [bin_stat(c, k) for k in keys]
                # counted over the binary protocol too: set, get, delete
                bin_request(c, 0x01, b"bp:1", struct.pack(">II", 0, 0), b"v")
                bin_request(c, 0x00, b"bp:1")
                bin_request(c, 0x00, b"bp:2")
                bin_request(c, 0x04, b"bp:1")
                res.append(bin_stat(c, b"detail dump"))
                res.append(bin_stat(c, b"resetX"))
                res.append(bin_stat(c, b"detail dumpX"))
                settings = bin_stat(c, b"settingsX")
                res.append([p[:24] for p in settings[-1:]])
                self.assertGreater(len(settings), 20)
                self.assertEqual(settings[0][24:24 + 8], b"maxbytes")
                got.append(res)
        for i, (x, y) in enumerate(zip(*got)):
            self.assertEqual(x, y, "request %d" % i)
        self.assertIn(b"PREFIX bp get 2 hit 1 set 1 del 1\r\nEND\r\n", b"".join(got[1][len(keys)]))

    def test_stats_conns_layout(self):
        ref, dut = self.pair()
        layouts = []
        for s in (ref, dut):
            idle = socket.create_connection(("127.0.0.1", s.port))
            partial = socket.create_connection(("127.0.0.1", s.port))
            partial.sendall(b"get a")
            with s.conn() as c:
                c.request(b"version\r\n")
                kuratest.poll_until(lambda: b"conn_read" in c.transcript(b"stats conns\r\n"),
                                    what="the partial request read")
                r = c.transcript(b"stats conns\r\n").decode()
            idle.close()
            partial.close()
            lines = r.splitlines()
            self.assertEqual(lines[-1], "END")
            fds = []
            layout = []
            for ln in lines[:-1]:
                m = re.match(r"STAT (\d+):(\w+) (.*)$", ln)
                self.assertIsNotNone(m, ln)
                fd, field, value = int(m.group(1)), m.group(2), m.group(3)
                if not fds or fds[-1] != fd:
                    fds.append(fd)
                if field in ("addr", "listen_addr"):
                    self.assertRegex(value, r"^tcp:127\.0\.0\.1:\d+$")
                    value = "<addr>" if field == "addr" and fd != fds[0] else value.replace(
                        ":%d" % s.port, ":<port>")
                if field == "secs_since_last_cmd":
                    self.assertRegex(value, r"^\d+$")
                    value = "<n>"
                layout.append((len(fds) - 1, field, value))
            self.assertEqual(fds, sorted(fds), "by descriptor")
            # one block per connection; the blocks compared as a set: which
            # of the idle and the partial connection got the lower
            # descriptor depends on what else closed between their accepts
            blocks = {}
            for i, field, value in layout:
                blocks.setdefault(i, []).append((field, value))
            layouts.append(sorted(tuple(b) for b in blocks.values()))
        self.assertEqual(layouts[0], layouts[1])
        states = sorted(v for b in layouts[1] for f, v in b if f == "state")
        self.assertEqual(states, sorted(["conn_listening", "conn_new_cmd", "conn_read",
                                         "conn_parse_cmd"]))


if __name__ == "__main__":
    kuratest.main()
