#!/usr/bin/python3
# The binary protocol against memcached 1.6, byte for byte.  Each test starts
# memcached (the reference) and kurad, sends both the same binary requests
# and compares every response packet exactly, masking only the cas field
# (uniques are handed out differently) and the version string.  A request
# may carry CAS_OF(key): the cas that side last returned for the key.
#
# Covers every opcode memcached answers (get getq getk getkq set setq add
# addq replace replaceq delete deleteq incr incrq decr decrq append appendq
# prepend prependq quit quitq flush flushq noop version stat touch gat gatq
# gatk gatkq), cas on every change, incr/decr with initial value and
# expiration (0xffffffff: no create), quiet pipelines fenced by noop, SASL
# answered as memcached without SASL, and bad input: bad magic, lengths that
# lie (key and extras past the body, wrong extras for the opcode), keys over
# 250 bytes, unknown opcodes, oversized values (refused, skipped, the old
# value gone), truncated headers and bodies, a client sending one byte at a
# time, garbage after a valid request; the server keeps serving others and
# its memory stays bounded.
#
# The compatibility tests skip under KURA_SERVER=memcached unless
# KURA_COMPAT_SELFCHECK=1; the bad-input tests that only check kurad's own
# bounds run against whichever server is chosen.
import os, random, socket, struct, sys, time, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, ServerTestCase, Closed, poll_until

SELFCHECK = os.environ.get("KURA_COMPAT_SELFCHECK") == "1"
SKIP = kuratest.is_memcached() and not SELFCHECK
MB = 1024 * 1024

GET, SET, ADD, REPLACE, DELETE, INCR, DECR, QUIT, FLUSH, GETQ, NOOP, VERSION, GETK, GETKQ, \
    APPEND, PREPEND, STAT, SETQ, ADDQ, REPLACEQ, DELETEQ, INCRQ, DECRQ, QUITQ, FLUSHQ, \
    APPENDQ, PREPENDQ = range(0x1b)
VERBOSITY, TOUCH, GAT, GATQ = 0x1b, 0x1c, 0x1d, 0x1e
SASL_LIST, SASL_AUTH, SASL_STEP, GATK, GATKQ = 0x20, 0x21, 0x22, 0x23, 0x24
FENCE_OPAQUE = 0xfeedf00d


class CasOf:
    def __init__(self, key):
        self.key = key


def req(op, key=b"", extras=b"", value=b"", cas=0, opaque=0, magic=0x80, keylen=None,
        extlen=None, bodylen=None):
    """A request packet; keylen/extlen/bodylen override the true lengths."""
    kl = len(key) if keylen is None else keylen
    el = len(extras) if extlen is None else extlen
    bl = len(key) + len(extras) + len(value) if bodylen is None else bodylen
    return (struct.pack(">BBHBBHIIQ", magic, op, kl, el, 0, 0, bl, opaque, 0)
            + extras + key + value, cas)


def store(op, key, value, flags=0, exp=0, cas=0, opaque=0):
    return req(op, key, struct.pack(">II", flags, exp), value, cas, opaque)


def arith(op, key, delta=1, initial=0, exp=0, cas=0, opaque=0):
    return req(op, key, struct.pack(">QQI", delta, initial, exp), cas=cas, opaque=opaque)


def touch(op, key, exp, opaque=0):
    return req(op, key, struct.pack(">I", exp), opaque=opaque)


def read_packet(c):
    h = c.recv_exact(24)
    bodylen = struct.unpack(">I", h[8:12])[0]
    return h + c.recv_exact(bodylen)


def mask(p):
    """Mask the cas of a response and the body of a version response."""
    if len(p) < 24:
        return p
    out = p[:16] + b"<cas>" + p[24:]
    if p[1] == VERSION and p[6:8] == b"\x00\x00":
        out = out[:24 + 5] + b"<v>"
    return out


class Side:
    def __init__(self, server):
        self.server = server
        self.c = server.conn(timeout=10)
        self.cas = {}

    def pack(self, item):
        pkt, cas = item
        if isinstance(cas, CasOf):
            cas = self.cas.get(cas.key, 0)
        return pkt[:16] + struct.pack(">Q", cas) + pkt[24:]

    def run(self, items, fence=True):
        """Send the requests (and a noop fence); return the masked response
        packets up to the fence's, or up to the close (b"<closed>")."""
        data = b"".join(self.pack(i) for i in items)
        if fence:
            data += req(NOOP, opaque=FENCE_OPAQUE)[0]
        self.c.send(data)
        out = []
        while True:
            try:
                p = read_packet(self.c)
            except Closed as e:
                if e.got:
                    out.append(e.got)
                out.append(b"<closed>")
                return out
            except TimeoutError:
                out.append(b"<timeout>")
                return out
            if p[1] == NOOP and p[12:16] == struct.pack(">I", FENCE_OPAQUE):
                return out
            self.note(p)
            out.append(mask(p))

    def note(self, p):
        if p[1] in (GETK, GETKQ, GATK, GATKQ) and p[6:8] == b"\x00\x00":
            kl, el = struct.unpack(">H", p[2:4])[0], p[4]
            self.cas[p[24 + el:24 + el + kl]] = struct.unpack(">Q", p[16:24])[0]


class BinaryCompat(unittest.TestCase):
    SERVER_OPTS = {}

    def setUp(self):
        if SKIP:
            self.skipTest(kuratest.not_applicable(
                "KURA_SERVER=memcached (set KURA_COMPAT_SELFCHECK=1 to compare memcached with itself)"))
        self.ref = Server(kind="memcached", **self.SERVER_OPTS)
        self.addCleanup(self.ref.stop)
        self.dut = Server(kind="memcached" if SELFCHECK else "kurad", **self.SERVER_OPTS)
        self.addCleanup(self.dut.stop)
        self.sides = [Side(self.ref), Side(self.dut)]
        for s in self.sides:
            self.addCleanup(s.c.close)

    def script(self, *steps, fence=True):
        for i, step in enumerate(steps):
            a = self.sides[0].run(step, fence)
            b = self.sides[1].run(step, fence)
            if a != b:
                self.fail("step %d differs\nmemcached: %r\n%-10s %r" % (i, a, self.dut.kind + ":", b))

    def test_get_set_family(self):
        self.script(
            [store(SET, b"a", b"hello", flags=7), req(GET, b"a"), req(GETK, b"a"), req(GET, b"nope"),
             req(GETK, b"nope"), req(GETQ, b"nope"), req(GETKQ, b"nope"), req(GETQ, b"a"), req(GETKQ, b"a")],
            [store(ADD, b"a", b"x"), store(ADD, b"b", b"y"), store(REPLACE, b"c", b"z"),
             store(REPLACE, b"b", b"w", flags=1), req(GETK, b"b")],
            [store(SETQ, b"q", b"1"), store(ADDQ, b"q", b"2"), store(REPLACEQ, b"nope", b"3"),
             store(ADDQ, b"q2", b"4"), store(REPLACEQ, b"q2", b"5"), req(GETK, b"q"), req(GETK, b"q2")],
            [store(SET, b"e", b""), req(GET, b"e"), store(SET, b"f", b"\x00\r\n\xff", flags=0xffffffff),
             req(GETK, b"f")],
            [req(GET, b"a", opaque=0x12345678), req(NOOP, opaque=7), req(VERSION, opaque=9)],
        )

    def test_cas(self):
        self.script(
            [store(SET, b"a", b"1"), req(GETK, b"a")],
            [store(SET, b"a", b"2", cas=CasOf(b"a")), store(SET, b"a", b"3", cas=CasOf(b"a")),
             req(GET, b"a")],
            [req(GETK, b"a")],
            [store(REPLACE, b"a", b"4", cas=CasOf(b"a")), req(GETK, b"a")],
            [store(ADD, b"a", b"5", cas=CasOf(b"a")), store(ADD, b"new", b"5", cas=12345), req(GET, b"a")],
            [req(GETK, b"a")],
            [req(APPEND, b"a", value=b"x", cas=1), req(APPEND, b"a", value=b"y", cas=CasOf(b"a")),
             req(GET, b"a")],
            [req(GETK, b"a")],
            [req(DELETE, b"a", cas=1), req(DELETE, b"a", cas=CasOf(b"a")), req(GET, b"a")],
            [store(SET, b"n", b"5"), req(GETK, b"n")],
            [arith(INCR, b"n", 1, cas=1), arith(INCR, b"n", 1, cas=CasOf(b"n"))],
            [store(SET, b"x", b"1", cas=999), req(DELETE, b"x", cas=5)],
        )

    def test_delete_incr_decr(self):
        self.script(
            [store(SET, b"a", b"1"), req(DELETE, b"a"), req(DELETE, b"a"), req(DELETEQ, b"a"),
             store(SET, b"a", b"1"), req(DELETEQ, b"a"), req(GET, b"a")],
            [store(SET, b"n", b"10"), arith(INCR, b"n", 5), arith(DECR, b"n", 3), arith(DECR, b"n", 100),
             req(GET, b"n")],
            [arith(INCR, b"c", 5, 42, 0), arith(INCR, b"c", 5, 42, 0), req(GET, b"c"),
             arith(DECR, b"d", 5, 42, 0xffffffff), req(GET, b"d"),
             arith(INCRQ, b"c", 1), arith(DECRQ, b"c", 1), arith(INCRQ, b"nope", 1, 0, 0xffffffff)],
            [store(SET, b"s", b"abc"), arith(INCR, b"s", 1), store(SET, b"m", b"18446744073709551615"),
             arith(INCR, b"m", 2), req(GET, b"m"), store(SET, b"p", b"100"), arith(DECR, b"p", 1),
             req(GET, b"p")],
            [arith(INCR, b"big", 1, 18446744073709551615, 0), req(GET, b"big")],
            # a NUL ends the stored number, as in memcached's C-string read
            [store(SET, b"z", b"12\0x"), arith(INCR, b"z", 1), req(GET, b"z"),
             store(SET, b"y", b"\x0012"), arith(INCR, b"y", 1)],
        )

    def test_append_prepend(self):
        self.script(
            [store(SET, b"a", b"bc", flags=5), req(APPEND, b"a", value=b"de"), req(PREPEND, b"a", value=b"a"),
             req(GETK, b"a"), req(APPEND, b"nope", value=b"x"), req(PREPEND, b"nope", value=b"x"),
             req(APPENDQ, b"a", value=b"f"), req(PREPENDQ, b"a", value=b"_"), req(APPENDQ, b"zz", value=b"x"),
             req(GET, b"a")],
        )

    def test_touch_gat(self):
        # the gats of exptime 1 at the end must run within one second of
        # each server's clock: repeated until both sides agree
        # (kuratest.repeat_until_alike says why)
        step = [store(SET, b"a", b"1", flags=3), touch(TOUCH, b"a", 100), touch(TOUCH, b"nope", 100),
                touch(GAT, b"a", 100), touch(GATK, b"a", 0), touch(GAT, b"nope", 1), touch(GATK, b"nope", 1),
                touch(GATQ, b"nope", 1), touch(GATKQ, b"nope", 1), touch(GATQ, b"a", 1), touch(GATKQ, b"a", 1)]
        a, b = kuratest.repeat_until_alike(lambda: (self.sides[0].run(step, True), self.sides[1].run(step, True)))
        self.assertEqual(a, b, "memcached: %r\n%-10s %r" % (a, self.dut.kind + ":", b))

    def test_flush_quit_version(self):
        self.script(
            [store(SET, b"a", b"1"), req(FLUSH), req(GET, b"a"), store(SET, b"a", b"1"), req(FLUSHQ),
             req(GET, b"a"), req(FLUSH, extras=struct.pack(">I", 0)), req(VERSION)],
            [store(SET, b"b", b"1"), req(QUITQ), req(GET, b"b")],
        )

    def test_quit(self):
        self.script([req(NOOP), req(QUIT), req(GET, b"x")])

    def test_stat(self):
        # values differ; the shape (names in order, terminator) is compared
        for side in self.sides:
            side.c.send(req(STAT)[0] + req(STAT, b"settings")[0] + req(STAT, b"bogus")[0]
                        + req(STAT, b"reset")[0] + req(NOOP, opaque=1)[0])
        got = []
        for side in self.sides:
            pkts = []
            while True:
                p = read_packet(side.c)
                if p[1] == NOOP:
                    break
                pkts.append(p)
            names = [p[24:24 + struct.unpack(">H", p[2:4])[0]] for p in pkts]
            got.append(names)
            self.assertIn(b"pid", names)
            self.assertIn(b"curr_items", names)
            self.assertIn(b"maxconns", names)
            self.assertEqual(sum(1 for p in pkts if p[6:8] == b"\x00\x01"), 1, side.server.kind)
            self.assertEqual(sum(1 for p in pkts if p[8:12] == b"\0\0\0\0" and p[6:8] == b"\0\0"), 3)

    def test_sasl_and_unknown(self):
        self.script(
            [req(SASL_LIST), req(SASL_AUTH, b"PLAIN", value=b"\x00u\x00p"), req(SASL_STEP, b"PLAIN"),
             req(VERBOSITY, extras=struct.pack(">I", 1)), req(0x40), req(0xfe, b"k"), req(GET, b"a")],
        )

    def test_quiet_pipeline(self):
        sets = [store(SETQ, b"k%d" % i, b"v%d" % i, flags=i) for i in range(200)]
        gets = [req(GETKQ, b"k%d" % i) for i in range(0, 300, 7)]
        self.script(sets, gets, [req(GETQ, b"k1"), req(GET, b"k2"), req(GETQ, b"nope")])

    def test_item_size(self):
        n = MB - 56 - 2 - 2
        self.script(
            [store(SET, b"k", b"v" * n), store(SET, b"k", b"v" * (n + 1)), req(GET, b"k")],
            [store(SET, b"k", b"x"), store(SET, b"k", b"v" * (2 * MB)), req(GET, b"k")],
            [store(SET, b"k", b"x"), store(ADD, b"z", b"v" * (2 * MB)), store(SETQ, b"k", b"v" * (2 * MB)),
             req(APPEND, b"k", value=b"v" * (2 * MB)), req(GET, b"k")],
            [store(SET, b"k", b"v" * (MB - 80)), req(APPEND, b"k", value=b"v" * 100), req(GET, b"k")],
        )

    def test_bad_lengths_close(self):
        cases = [
            [req(GET, b"abc", bodylen=2)],                      # key past the body
            [req(SET, b"abc", b"12345678", bodylen=5)],         # key and extras past the body
            [req(GET, b"a", extras=b"xx")],                     # extras on a get
            [req(SET, b"a", b"1234", b"v")],                    # 4 bytes of extras on a set
            [req(INCR, b"a", b"x" * 8)],                        # short incr extras
            [req(DELETE, b"a", value=b"extra")],                # a body on delete
            [req(NOOP, b"k")], [req(VERSION, value=b"x")], [req(QUIT, extras=b"x")],
            [req(FLUSH, extras=b"xx")], [req(TOUCH, b"a")], [req(GET)], [req(STAT, extras=b"1234")],
            [req(GET, b"k" * 251)], [store(SET, b"k" * 251, b"v")],
            [req(SASL_AUTH, b"", value=b"x")],
        ]
        for case in cases:
            self.setUp_sides()
            self.script(case)

    def setUp_sides(self):
        for s in self.sides:
            s.c.close()
        self.sides = [Side(self.ref), Side(self.dut)]
        for s in self.sides:
            self.addCleanup(s.c.close)

    def test_bad_magic(self):
        self.script([req(GET, b"a", magic=0x81)])
        self.setUp_sides()
        self.script([store(SET, b"a", b"1"), req(GET, b"a", magic=0x00)])

    def test_garbage_after_valid(self):
        rnd = random.Random(11)
        junk = bytes(rnd.randrange(256) for _ in range(300))
        self.script([store(SET, b"a", b"1"), (junk, 0)])

    def test_one_byte_at_a_time(self):
        data = b"".join(p for p, _ in [store(SET, b"slow", b"hello", flags=5), req(GETK, b"slow"),
                                       arith(INCR, b"n", 1, 7, 0), req(DELETE, b"slow"),
                                       req(GET, b"slow"), req(NOOP, opaque=FENCE_OPAQUE)])
        outs = []
        for side in self.sides:
            for i in range(len(data)):
                side.c.send(data[i:i + 1])
            outs.append(side.run([], fence=False))
        self.assertEqual(outs[0], outs[1])


class BinaryBounds(ServerTestCase):
    """Bad input that only needs the server under test: it keeps serving."""

    def conn(self):
        c = self.server.conn(timeout=10)
        self.addCleanup(c.close)
        return c

    def test_truncated_then_close(self):
        for data in (req(GET, b"abc")[0][:10], req(GET, b"abc")[0][:25],
                     store(SET, b"a", b"v" * 1000)[0][:500]):
            c = self.conn()
            c.send(data)
            c.close()
        self.check_serving()

    def rss_mb(self):
        with open("/proc/%d/status" % self.server.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        return 0.0

    def test_oversized_body_not_buffered(self):
        # a set claiming a 1 GB value: refused, its body skipped as it comes,
        # never buffered (memcached answers once the body is skipped; kurad
        # at once)
        before = self.rss_mb()
        c = self.conn()
        hdr, _ = req(SET, b"big", struct.pack(">II", 0, 0), bodylen=(1 << 30) + 9 + 3)
        c.send(hdr)
        chunk = b"x" * (1 << 20)
        for _ in range(64):
            c.send(chunk)
        self.check_serving()
        self.assertLess(self.rss_mb() - before, 32, "64 MB of refused body was buffered")

    def test_huge_key_length(self):
        # a 65535-byte key: an error (kurad: EINVAL) or nothing, then closed
        c = self.conn()
        c.send(req(GET, b"", keylen=65535, bodylen=65535)[0] + b"k" * 65535)
        got = c.read_to_close(10)
        if got:
            self.assertEqual(got[6:8], b"\x00\x04")
        self.check_serving()

    def test_other_clients_unaffected(self):
        slow = self.conn()
        slow.send(store(SET, b"a", b"v" * 100)[0][:50])     # half a request, held open
        fast = self.conn()
        fast.send(store(SET, b"b", b"1")[0] + req(GETK, b"b")[0])
        self.assertEqual(read_packet(fast)[6:8], b"\x00\x00")
        self.assertEqual(read_packet(fast)[-1:], b"1")

    def test_random_packets(self):
        rnd = random.Random(3)
        for _ in range(30):
            c = self.conn()
            op = rnd.randrange(0x30)
            key = bytes(rnd.randrange(33, 127) for _ in range(rnd.randrange(0, 20)))
            ext = bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 4, 8, 20, 3])))
            val = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 50)))
            c.send(req(op, key, ext, val)[0] + req(NOOP)[0])
            try:
                c.read_available(0.05)
            except OSError:
                pass
        self.check_serving()


if __name__ == "__main__":
    kuratest.main()
