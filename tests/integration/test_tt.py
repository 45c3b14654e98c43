#!/usr/bin/python3
# Tokyo Tyrant's binary protocol (docs/protocol.md, "Tokyo Tyrant's
# protocol"), on every backend, with a client written here from the
# protocol's description (Tokyo Tyrant's spex.html and tcrdb.3: 0xC8, a
# command byte, big-endian lengths, a status byte back), not from kura's
# code.
#
#  * A transcript of every command (put putkeep putcat putshl putnr out get
#    mget vsiz iterinit iternext fwmkeys addint adddouble ext sync optimize
#    vanish copy restore rnum and the misc functions) whose expected replies
#    were recorded byte for byte from ttserver 1.1.41 (built from its
#    source against Debian's libtokyocabinet 1.4.48) on a hash database;
#    where ttserver's answer depends on state kura does not have, the test
#    says so (misc getlist/outlist with a missing key: ttserver's answer
#    follows the worker thread's last error; kura answers as a fresh
#    thread does).
#  * The same keys through the memcached protocol: a value put here is read
#    there and back, addint's 4-byte little-endian int and adddouble's
#    8-byte double are what memcached's get shows, memcached's incr refuses
#    them as non-numeric, flags and expiry survive addint and putshl.
#  * The iterator (per connection, every key once, key order on the B+
#    tree), fwmkeys, misc regex/range over more keys than one call walks,
#    mget of many keys, a pipeline of many requests, stat's lines, setmst
#    answering failure without a hook.
#  * Bad input: unknown command, absurd and negative lengths, ttserver's
#    repl, a byte other than 0xC8 where a request starts, truncated
#    requests, a request a byte at a time: the connection is closed (or
#    left waiting) without a reply, and the server serves others; a value
#    over -I is answered 1 before its body is sent (so it is not buffered)
#    and the connection goes on after the body.
import os, shutil, socket, struct, subprocess, sys, tempfile, time, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase, Conn, Closed, not_applicable

SKIP = kuratest.is_memcached()
WHY = not_applicable("Tokyo Tyrant's protocol is kurad's")
P = struct.pack


# ---- a Tokyo Tyrant client, from the protocol description -----------------

def elems(*xs):
    return b"".join(P(">I", len(x)) + x for x in xs)


def put(k, v, cmd=0x10):
    return b"\xc8" + bytes([cmd]) + P(">II", len(k), len(v)) + k + v


def putkeep(k, v): return put(k, v, 0x11)
def putcat(k, v): return put(k, v, 0x12)
def putnr(k, v): return put(k, v, 0x18)


def putshl(k, v, width):
    return b"\xc8\x13" + P(">III", len(k), len(v), width) + k + v


def keycmd(cmd, k):
    return b"\xc8" + bytes([cmd]) + P(">I", len(k)) + k


def out(k): return keycmd(0x20, k)
def get(k): return keycmd(0x30, k)
def vsiz(k): return keycmd(0x38, k)


def mget(*ks):
    return b"\xc8\x31" + P(">I", len(ks)) + elems(*ks)


ITERINIT, ITERNEXT = b"\xc8\x50", b"\xc8\x51"
SYNC, VANISH, RNUM, SIZE, STAT = b"\xc8\x70", b"\xc8\x72", b"\xc8\x80", b"\xc8\x81", b"\xc8\x88"


def fwmkeys(prefix, mx):
    return b"\xc8\x58" + P(">Ii", len(prefix), mx) + prefix


def addint(k, n):
    return b"\xc8\x60" + P(">Ii", len(k), n) + k


def double_wire(integ, fract):
    return P(">qq", integ, fract)


def adddouble(k, integ, fract):
    return b"\xc8\x61" + P(">I", len(k)) + double_wire(integ, fract) + k


def ext(name, k, v):
    return b"\xc8\x68" + P(">IIII", len(name), 0, len(k), len(v)) + name + k + v


def pathcmd(cmd, path):
    return b"\xc8" + bytes([cmd]) + P(">I", len(path)) + path


def restore(path):
    return b"\xc8\x74" + P(">IQI", len(path), 0, 0) + path


def setmst(host, port):
    return b"\xc8\x78" + P(">IIQI", len(host), port, 0, 0) + host


def misc(name, *args):
    return b"\xc8\x90" + P(">III", len(name), 0, len(args)) + name + elems(*args)


class TT:
    """Reads replies by their shape (the client knows what it asked)."""

    def __init__(self, server):
        self.c = Conn(server.port)

    def close(self):
        self.c.close()

    def send(self, b):
        self.c.send(b)

    def code(self):
        return self.c.recv_exact(1)[0]

    def u32(self):
        return struct.unpack(">I", self.c.recv_exact(4))[0]

    def elem(self):
        return self.c.recv_exact(self.u32())

    def status(self, req):
        self.send(req)
        return self.code()

    def value(self, req):
        """get/iternext: the bytes, or None for status 1."""
        self.send(req)
        return self.elem() if self.code() == 0 else None

    def listing(self, req):
        """fwmkeys/misc: (status, [elements])."""
        self.send(req)
        st = self.code()
        n = self.u32()
        return st, [self.elem() for _ in range(n)]

    def mget(self, *ks):
        self.send(mget(*ks))
        self.assert_code(0)
        out = {}
        for _ in range(self.u32()):
            kl, vl = struct.unpack(">II", self.c.recv_exact(8))
            k = self.c.recv_exact(kl)
            out[k] = self.c.recv_exact(vl)
        return out

    def assert_code(self, want):
        got = self.code()
        if got != want:
            raise AssertionError("status %d, expected %d" % (got, want))

    def u64(self, req):
        self.send(req)
        self.assert_code(0)
        return struct.unpack(">Q", self.c.recv_exact(8))[0]

    def keys(self):
        """Every key the iterator gives from iterinit to the end."""
        assert self.status(ITERINIT) == 0
        ks = []
        while True:
            k = self.value(ITERNEXT)
            if k is None:
                return ks
            ks.append(k)


def raw_reply(c, timeout=0.3):
    return c.read_available(timeout)


# ---- recorded from ttserver 1.1.41 on a hash database ----------------------

TRANSCRIPT = [
    ("vanish", VANISH, b"\x00"),
    ("put", put(b"a", b"abc"), b"\x00"),
    ("putkeep-exists", putkeep(b"a", b"x"), b"\x01"),
    ("putkeep-new", putkeep(b"b", b"x"), b"\x00"),
    ("putcat", putcat(b"a", b"de"), b"\x00"),
    ("putcat-new", putcat(b"c", b"de"), b"\x00"),
    ("putshl", putshl(b"a", b"fg", 4), b"\x00"),
    ("putshl-new", putshl(b"d", b"123456", 4), b"\x00"),
    ("get a", get(b"a"), b"\x00\x00\x00\x00\x04defg"),
    ("get d", get(b"d"), b"\x00\x00\x00\x00\x06123456"),
    ("get miss", get(b"z"), b"\x01"),
    ("putnr", putnr(b"e", b"E"), b""),
    ("vsiz", vsiz(b"e"), b"\x00\x00\x00\x00\x01"),
    ("vsiz miss", vsiz(b"z"), b"\x01"),
    ("mget", mget(b"a", b"z", b"b"),
     b"\x00\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x04adefg\x00\x00\x00\x01\x00\x00\x00\x01bx"),
    ("out", out(b"e"), b"\x00"),
    ("out miss", out(b"e"), b"\x01"),
    ("addint new", addint(b"i", -7), b"\x00\xff\xff\xff\xf9"),
    ("addint", addint(b"i", 10), b"\x00\x00\x00\x00\x03"),
    ("get i", get(b"i"), b"\x00\x00\x00\x00\x04\x03\x00\x00\x00"),
    ("addint on 4 bytes", addint(b"a", 10), b"\x00gfen"),
    ("adddouble", adddouble(b"f", 1, 250000000000),
     b"\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00:5)D\x00"),
    ("adddouble2", adddouble(b"f", -3, -500000000000),
     b"\x00\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff\xc5\xca\xd6\xbc\x00"),
    ("get f", get(b"f"), b"\x00\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x02\xc0"),
    ("adddouble on 4 bytes", adddouble(b"i", 1, 0), b"\x01"),
    ("iterinit", ITERINIT, b"\x00"),
    ("fwmkeys", fwmkeys(b"a", -1), b"\x00\x00\x00\x00\x01\x00\x00\x00\x01a"),
    ("fwmkeys max 0", fwmkeys(b"a", 0), b"\x00\x00\x00\x00\x00"),
    ("fwmkeys none", fwmkeys(b"zz", 10), b"\x00\x00\x00\x00\x00"),
    ("ext", ext(b"foo", b"a", b"b"), b"\x01"),
    ("sync", SYNC, b"\x00"),
    ("optimize", pathcmd(0x71, b""), b"\x00"),
    ("rnum", RNUM, b"\x00\x00\x00\x00\x00\x00\x00\x00\x06"),
    ("misc put", misc(b"put", b"m", b"v"), b"\x00\x00\x00\x00\x00"),
    ("misc put one arg", misc(b"put", b"m"), b"\x01\x00\x00\x00\x00"),
    ("misc putkeep", misc(b"putkeep", b"m", b"v"), b"\x01\x00\x00\x00\x00"),
    ("misc putcat", misc(b"putcat", b"m", b"w"), b"\x00\x00\x00\x00\x00"),
    ("misc get", misc(b"get", b"m"), b"\x00\x00\x00\x00\x01\x00\x00\x00\x02vw"),
    ("misc get miss", misc(b"get", b"zz"), b"\x01\x00\x00\x00\x00"),
    ("misc out", misc(b"out", b"m"), b"\x00\x00\x00\x00\x00"),
    ("misc out miss", misc(b"out", b"m"), b"\x01\x00\x00\x00\x00"),
    ("misc putlist", misc(b"putlist", b"p1", b"v1", b"p2", b"v2", b"odd"), b"\x00\x00\x00\x00\x00"),
    # ttserver: success on a fresh worker thread (recorded), 1 when that
    # thread's last error was not "no record" (see the header)
    ("misc getlist", misc(b"getlist", b"p1", b"zz", b"p2"),
     b"\x00\x00\x00\x00\x04" + elems(b"p1", b"v1", b"p2", b"v2")),
    ("misc outlist", misc(b"outlist", b"p1", b"zz"), b"\x00\x00\x00\x00\x00"),
    ("misc getpart", misc(b"getpart", b"d", b"1", b"2"), b"\x00\x00\x00\x00\x01\x00\x00\x00\x0223"),
    ("misc getpart from", misc(b"getpart", b"d", b"2"), b"\x00\x00\x00\x00\x01\x00\x00\x00\x043456"),
    ("misc getpart past end", misc(b"getpart", b"d", b"9"), b"\x01\x00\x00\x00\x00"),
    ("misc putdup", misc(b"putdup", b"x", b"y"), b"\x01\x00\x00\x00\x00"),
    ("misc setindex", misc(b"setindex", b"x", b"0"), b"\x01\x00\x00\x00\x00"),
    ("misc search", misc(b"search"), b"\x01\x00\x00\x00\x00"),
    ("misc genuid", misc(b"genuid"), b"\x01\x00\x00\x00\x00"),
    ("misc range", misc(b"range"), b"\x01\x00\x00\x00\x00"),        # hash: no range
    ("misc regex", misc(b"regex", b"^p2"), b"\x00\x00\x00\x00\x02" + elems(b"p2", b"v2")),
    ("misc regex bad", misc(b"regex", b"("), b"\x01\x00\x00\x00\x00"),
    ("misc sync", misc(b"sync"), b"\x00\x00\x00\x00\x00"),
    ("misc optimize", misc(b"optimize"), b"\x00\x00\x00\x00\x00"),
    ("misc defrag", misc(b"defrag"), b"\x00\x00\x00\x00\x00"),
    ("misc nosuch", misc(b"nosuch"), b"\x01\x00\x00\x00\x00"),
    ("misc iterinit", misc(b"iterinit"), b"\x00\x00\x00\x00\x00"),
    ("misc vanish", misc(b"vanish"), b"\x00\x00\x00\x00\x00"),
    ("get after vanish", get(b"a"), b"\x01"),
    ("iternext when empty", ITERNEXT, b"\x01"),
    ("copy", pathcmd(0x73, b"/nonexistent/"), b"\x01"),
    ("restore", restore(b"/nonexistent/"), b"\x01"),
]

# replies that are each one status byte, for pipelines: (request, reply size)
STAT_KEYS = ["version", "libver", "protver", "os", "time", "pid", "sid", "type", "path",
             "rnum", "size", "bigend", "fd", "loadavg", "ru_user", "ru_sys", "ru_real"]
CNT_KEYS = ["put", "putkeep", "putcat", "putshl", "putnr", "out", "get", "mget", "vsiz",
            "iterinit", "iternext", "fwmkeys", "addint", "adddouble", "ext", "sync",
            "optimize", "vanish", "copy", "restore", "setmst", "rnum", "size", "stat", "misc",
            "repl", "put_miss", "out_miss", "get_miss"]


@unittest.skipIf(SKIP, WHY)
class TTProtocol(ServerTestCase):
    SERVER_OPTS = {"item_max": "64k"}

    def tt(self):
        t = TT(self.server)
        self.addCleanup(t.close)
        return t

    def test_transcript(self):
        """Every command, byte for byte as ttserver 1.1.41 answered it."""
        t = self.tt()
        for name, req, want in TRANSCRIPT:
            if name == "misc range" and kuratest.db_kind() == "tree":
                continue                # the B+ tree answers range (test_range)
            with self.subTest(name=name):
                t.send(req)
                got = t.c.recv_exact(len(want)) if want else b""
                self.assertEqual(got, want)
        self.assertEqual(raw_reply(t.c, 0.1), b"", "nothing more than the replies")

    def test_memcached_sees_tt_values(self):
        t = self.tt()
        self.assertEqual(t.status(put(b"k1", b"hello")), 0)
        self.assertEqual(self.c.request(b"get k1\r\n"), b"VALUE k1 0 5\r\nhello\r\nEND\r\n")
        self.assertEqual(self.c.request(b"set k2 9 0 3\r\nabc\r\n"), b"STORED\r\n")
        self.assertEqual(t.value(get(b"k2")), b"abc")
        self.assertEqual(self.c.request(b"append k2 0 0 2\r\nde\r\n"), b"STORED\r\n")
        self.assertEqual(t.value(get(b"k2")), b"abcde")
        self.assertEqual(t.status(putcat(b"k2", b"f")), 0)
        # putcat is an append: the flags memcached gave stay
        self.assertEqual(self.c.request(b"get k2\r\n"), b"VALUE k2 9 6\r\nabcdef\r\nEND\r\n")
        self.assertEqual(t.status(putkeep(b"k2", b"x")), 1)
        self.assertEqual(self.c.request(b"add k1 0 0 1\r\nx\r\n"), b"NOT_STORED\r\n")
        self.assertEqual(t.status(out(b"k1")), 0)
        self.assertEqual(self.c.request(b"get k1\r\n"), b"END\r\n")
        self.assertEqual(self.c.request(b"delete k2\r\n"), b"DELETED\r\n")
        self.assertIsNone(t.value(get(b"k2")))
        self.assertEqual(t.status(out(b"k2")), 1)

    def test_addint_adddouble_through_memcached(self):
        t = self.tt()
        t.send(addint(b"n", 258))
        t.assert_code(0)
        self.assertEqual(t.u32(), 258)
        # a 4-byte little-endian int, as Tokyo Cabinet stores it
        self.assertEqual(self.c.request(b"get n\r\n"), b"VALUE n 0 4\r\n\x02\x01\x00\x00\r\nEND\r\n")
        # memcached's incr works on decimal text: this value is not
        self.assertEqual(self.c.request(b"incr n 1\r\n"),
                         b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
        # a decimal counter of memcached's is not an addint one
        self.assertEqual(self.c.request(b"set ctr 0 0 2\r\n10\r\n"), b"STORED\r\n")
        self.assertEqual(t.status(addint(b"ctr", 1)), 1)
        self.assertEqual(self.c.request(b"incr ctr 5\r\n"), b"15\r\n")
        # flags and expiry of a record memcached set survive addint
        self.assertEqual(self.c.request(b"set four 42 0 4\r\n\x01\x00\x00\x00\r\n"), b"STORED\r\n")
        t.send(addint(b"four", 1))
        t.assert_code(0)
        self.assertEqual(t.u32(), 2)
        self.assertEqual(self.c.request(b"get four\r\n"),
                         b"VALUE four 42 4\r\n\x02\x00\x00\x00\r\nEND\r\n")
        t.send(adddouble(b"d", 2, 500000000000))
        t.assert_code(0)
        self.assertEqual(t.c.recv_exact(16), double_wire(2, 500000000000))
        self.assertEqual(self.c.request(b"get d\r\n"),
                         b"VALUE d 0 8\r\n" + struct.pack("<d", 2.5) + b"\r\nEND\r\n")

    def test_putshl_keeps_flags(self):
        t = self.tt()
        self.assertEqual(self.c.request(b"set s 7 0 3\r\nabc\r\n"), b"STORED\r\n")
        self.assertEqual(t.status(putshl(b"s", b"defgh", 6)), 0)
        self.assertEqual(self.c.request(b"get s\r\n"), b"VALUE s 7 6\r\ncdefgh\r\nEND\r\n")
        self.assertEqual(t.status(putshl(b"s", b"XY", 3)), 0)
        self.assertEqual(t.value(get(b"s")), b"hXY")

    def test_iterator_every_key_once(self):
        t = self.tt()
        want = set()
        for i in range(700):            # more than one listing batch
            k = b"it%04d" % i
            want.add(k)
            t.send(putnr(k, b"v"))
        self.assertEqual(t.u64(RNUM), 700)
        ks = t.keys()
        self.assertEqual(len(ks), len(want))
        self.assertEqual(set(ks), want)
        if kuratest.db_kind() == "tree":
            self.assertEqual(ks, sorted(ks))
        # another connection's iterator is its own
        t2 = self.tt()
        self.assertEqual(t2.status(ITERINIT), 0)
        first = t2.value(ITERNEXT)
        self.assertEqual(t.status(ITERINIT), 0)
        self.assertIsNotNone(t.value(ITERNEXT))
        second = t2.value(ITERNEXT)
        self.assertNotEqual(first, second)
        # misc iternext gives key and value
        self.assertEqual(t.listing(misc(b"iterinit"))[0], 0)
        st, kv = t.listing(misc(b"iternext"))
        self.assertEqual((st, len(kv), kv[0] in want, kv[1]), (0, 2, True, b"v"))

    def test_fwmkeys_many(self):
        t = self.tt()
        for i in range(2500):           # more than one call walks (TT_WALK_SLICE)
            t.send(putnr(b"pre%05d" % i, b"x"))
            t.send(putnr(b"other%05d" % i, b"x"))
        self.assertEqual(t.u64(RNUM), 5000)
        st, ks = t.listing(fwmkeys(b"pre", -1))
        self.assertEqual(st, 0)
        self.assertEqual(sorted(ks), [b"pre%05d" % i for i in range(2500)])
        if kuratest.db_kind() == "tree":
            self.assertEqual(ks, sorted(ks))
        st, ks = t.listing(fwmkeys(b"pre0001", 5))
        self.assertEqual((st, len(ks)), (0, 5))
        self.assertTrue(all(k.startswith(b"pre0001") for k in ks))
        st, kv = t.listing(misc(b"regex", b"*^PRE0002[0-4]$"))
        self.assertEqual(st, 0)
        self.assertEqual(sorted(kv[0::2]), [b"pre0002%d" % i for i in range(5)])
        self.assertEqual(kv[1::2], [b"x"] * 5)
        st, kv = t.listing(misc(b"regex", b"^other", b"3"))
        self.assertEqual((st, len(kv)), (0, 6))
        # the connection goes on after a listing that took several calls
        self.assertEqual(t.value(get(b"pre00000")), b"x")

    def test_range(self):
        t = self.tt()
        for k in (b"r1", b"r2", b"r3", b"r4"):
            t.send(putnr(k, k.upper()))
        st, kv = t.listing(misc(b"range", b"r2", b"0", b"r4"))
        if kuratest.db_kind() != "tree":
            self.assertEqual((st, kv), (1, []))     # a hash database has no range
            return
        self.assertEqual((st, kv), (0, [b"r2", b"R2", b"r3", b"R3"]))
        st, kv = t.listing(misc(b"range", b"r2", b"1"))
        self.assertEqual((st, kv), (0, [b"r2", b"R2"]))

    def test_mget_many_and_large(self):
        t = self.tt()
        big = b"v" * 60000
        for i in range(50):
            t.send(putnr(b"m%d" % i, big if i % 10 == 0 else b"%d" % i))
        got = t.mget(*[b"m%d" % i for i in range(60)])
        self.assertEqual(len(got), 50)
        self.assertEqual(got[b"m0"], big)
        self.assertEqual(got[b"m7"], b"7")

    def test_pipeline(self):
        t = self.tt()
        self.assertEqual(t.status(put(b"p", b"pv")), 0)
        n = 2000                        # past KURA_REQUESTS_PER_CALL in one send
        t.send(get(b"p") * n)
        want = b"\x00\x00\x00\x00\x02pv" * n
        self.assertEqual(t.c.recv_exact(len(want)), want)

    def test_byte_at_a_time(self):
        t = self.tt()
        req = put(b"slow", b"value") + get(b"slow")
        for i in range(len(req)):
            t.send(req[i:i + 1])
        self.assertEqual(t.c.recv_exact(11), b"\x00\x00\x00\x00\x00\x05value")

    def test_stat(self):
        t = self.tt()
        t.send(STAT)
        t.assert_code(0)
        text = t.elem().decode()
        self.assertTrue(text.endswith("\n"))
        lines = [ln.split("\t") for ln in text.rstrip("\n").split("\n")]
        self.assertTrue(all(len(p) == 2 for p in lines), text)
        names = [p[0] for p in lines]
        self.assertEqual(names, STAT_KEYS + ["cnt_" + k for k in CNT_KEYS])
        d = dict(lines)
        self.assertEqual(d["version"], "1.1.41")
        self.assertEqual(d["pid"], str(self.server.proc.pid))
        want = {"cache": "on-memory hash", "hash": "hash", "tree": "B+ tree"}
        self.assertEqual(d["type"], want[kuratest.db_kind()])
        self.assertGreaterEqual(int(d["cnt_stat"]), 1)

    def test_stat_sid(self):
        """stat's sid is -sid, as ttserver's is (ttserver -sid 7 answered
        "sid\t7"; kura said 0 whatever -sid was)."""
        srv = self.start_server(kura_args=("-sid", "7"))
        c = Conn(srv.port)
        self.addCleanup(c.close)
        c.send(STAT)
        self.assertEqual(c.recv_exact(1), b"\x00")
        text = c.recv_exact(struct.unpack(">I", c.recv_exact(4))[0]).decode()
        self.assertIn("\nsid\t7\n", text)

    def test_setmst_refused(self):
        """A server that cannot follow (no -ulog or -rts to keep a position
        in): ttserver's failure code; test_failover.py has setmst working."""
        t = self.tt()
        self.assertEqual(t.status(setmst(b"127.0.0.1", 1978)), 1)
        self.assertEqual(t.status(put(b"after", b"1")), 0)

    def test_setmst_stop_when_master(self):
        """setmst with no host (tcrmgr setmst without a master: host "",
        port 1978; or port 0) on a server that follows no one: ttserver
        1.1.41 answered 0 each time (recorded); kura said 1 ("not a
        replica") from the second on, or always for port 0."""
        d = tempfile.mkdtemp(prefix="kuratest-setmst-")
        self.addCleanup(shutil.rmtree, d, True)
        srv = self.start_server(kura_args=("-ulog", os.path.join(d, "ulog")))
        t = TT(srv)
        self.addCleanup(t.close)
        for host, port in ((b"", 0), (b"", 1978), (b"", 0)):
            with self.subTest(host=host, port=port):
                self.assertEqual(t.status(setmst(host, port)), 0)
        self.assertEqual(t.status(put(b"after", b"1")), 0)   # still a master

    def test_copy(self):
        """copy (tcrmgr copy, TT's hot backup) writes a kura snapshot at the
        path on the server and answers 0 once it is complete: the file is
        there whole (kuractl snapshot verify), no temporary file is left
        beside it, and it restores into a database holding the records.
        Before: 1, nothing written.  ttserver's "@command" form and a
        missing directory: 1."""
        d = tempfile.mkdtemp(prefix="kuratest-copy-")
        self.addCleanup(shutil.rmtree, d, True)
        t = self.tt()
        for i in range(50):
            self.assertEqual(t.status(put(b"c%d" % i, b"v%d" % i)), 0)
        dest = os.path.join(d, "backup.tch")
        self.assertEqual(t.status(pathcmd(0x73, dest.encode())), 0)
        self.assertEqual(sorted(os.listdir(d)), ["backup.tch"])
        kuractl = os.path.join(os.path.dirname(kuratest.kurad_path()), "kuractl")
        out = subprocess.run([kuractl, "snapshot", "verify", dest], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout)
        self.assertIn(b" 50 items", out.stdout)
        db = os.path.join(d, "restored.kh")
        out = subprocess.run([kuractl, "snapshot", "restore", dest, db],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout)
        srv = self.start_server(db=db)
        r = TT(srv)
        self.addCleanup(r.close)
        self.assertEqual(r.value(get(b"c49")), b"v49")
        # a second copy replaces the first whole
        self.assertEqual(t.status(put(b"c50", b"v50")), 0)
        self.assertEqual(t.status(pathcmd(0x73, dest.encode())), 0)
        out = subprocess.run([kuractl, "snapshot", "verify", dest], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=60)
        self.assertIn(b" 51 items", out.stdout)
        # refused: a command (ttserver's "@cmd"), a directory that is missing
        self.assertEqual(t.status(pathcmd(0x73, b"@/bin/true")), 1)
        self.assertEqual(t.status(pathcmd(0x73, os.path.join(d, "no", "x").encode())), 1)
        self.assertEqual([f for f in os.listdir(d) if f.startswith(".")], [], "no temporary")
        self.assertFalse(os.path.exists(os.path.join(d, "no")))
        self.assertEqual(t.status(put(b"after", b"1")), 0)

    def test_value_over_limit_not_buffered(self):
        t = self.tt()
        n = 200 * 1024                  # over -I 64k, under ttserver's 256 MiB
        t.send(b"\xc8\x10" + P(">II", 1, n) + b"k")
        # answered before the value is sent: it is not waited for
        self.assertEqual(t.c.recv_exact(1, timeout=5), b"\x01")
        t.send(b"z" * n)
        self.assertEqual(t.status(get(b"k")), 1)
        self.assertEqual(t.status(put(b"k", b"ok")), 0)
        self.assertEqual(t.value(get(b"k")), b"ok")
        # a key over -kmax (default 1024 bytes): no such record can be kept
        self.assertEqual(t.status(put(b"K" * 1025, b"v")), 1)
        self.assertEqual(t.status(get(b"K" * 1025)), 1)
        self.assertEqual(t.status(put(b"k", b"still")), 0)


@unittest.skipIf(SKIP, WHY)
class TTBadInput(ServerTestCase):
    SERVER_OPTS = {"item_max": "64k"}

    def closes(self, data, with_reply=b""):
        c = self.server.conn()
        self.addCleanup(c.close)
        c.send(data)
        got = c.read_to_close(timeout=5)
        self.assertEqual(got, with_reply)
        self.check_serving()

    def test_unknown_command(self):
        self.closes(b"\xc8\x99" + b"\x00" * 64)

    def test_repl_is_not_served(self):
        self.closes(b"\xc8\xa0" + P(">QI", 1, 5))

    def test_bad_magic_after_a_request(self):
        self.closes(put(b"a", b"b") + b"version\r\n", with_reply=b"\x00")

    def test_absurd_lengths(self):
        for req in (b"\xc8\x10" + P(">II", 1, 0x7fffffff),          # over 256 MiB
                    b"\xc8\x30" + P(">I", 0xffffffff),              # negative
                    b"\xc8\x13" + P(">III", 1, 1, 0x80000000),      # negative width
                    b"\xc8\x31" + P(">I", (1 << 20) + 1),           # too many keys
                    b"\xc8\x31" + P(">II", 2, 0xfffffff0),          # a key's length
                    b"\xc8\x31" + P(">II", 1, (16 << 20) + 1),      # over TT_REQ_MAX
                    b"\xc8\x90" + P(">III", 5000, 0, 0),            # misc name
                    b"\xc8\x90" + P(">III", 3, 0, 1) + b"put" + P(">I", 0x90000000),
                    b"\xc8\x68" + P(">IIII", 1024, 0, 0, 0),        # ext name
                    b"\xc8\x73" + P(">I", 4096),                    # a path
                    b"\xc8\x78" + P(">IIQI", 4, 0x80000000, 0, 0)):  # negative port
            with self.subTest(req=req[:12]):
                self.closes(req)

    def test_truncated_then_closed(self):
        for req in (b"\xc8", put(b"key", b"value")[:7], put(b"key", b"value")[:-1],
                    mget(b"a", b"b")[:-1], misc(b"putlist", b"a", b"b")[:-2]):
            c = self.server.conn()
            c.send(req)
            self.assertEqual(raw_reply(c, 0.2), b"")        # waits for the rest
            c.close()
        self.check_serving()

    def test_many_bad_connections_keep_memory_bounded(self):
        """Announced lengths are never allocated up front: 50 connections
        each announcing a 16 MiB mget cost the server nothing like 800 MiB."""
        conns = []
        for _ in range(50):
            c = self.server.conn()
            conns.append(c)
            c.send(b"\xc8\x31" + P(">II", 1, (16 << 20) - 8) + b"x" * 1000)
        self.check_serving()
        with open("/proc/%d/status" % self.server.proc.pid) as f:
            rss = [int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS:")][0]
        self.assertLess(rss, 200 << 20)
        for c in conns:
            c.close()


if __name__ == "__main__":
    kuratest.main()
