#!/usr/bin/python3
# Large values from the B+ tree go out by reference, not copied into the
# reply (src/proto/value.c, include/kura/buf.h, src/store/tree/tree_vref.c):
# 20 KB and 1 MB gets over text, meta and binary, pipelined by a client
# whose small receive window makes the server send each reply in many
# partial sendmsg() calls.  While the server holds the value
# (tree_value_cache_held_bytes > 0), another client overwrites the key and
# deletes it; the slow client still reads every reply byte-exact in its
# protocol's format: the old value for the gets answered before the
# overwrite, then the new one or a miss, never a mix.  Once all is read,
# every hold is released (held bytes back to 0: a hold never released, or
# released twice, shows).
#
# NEGATIVE check: with KURA_TEST_VREF_EARLY (testhooks.h) kurad releases
# each hold as soon as the value is queued; the overwrite then frees the
# entry under the slow client's reply (its bytes poisoned by glibc's
# MALLOC_PERTURB_ or AddressSanitizer's free fill, or caught as a
# use-after-free), and the same check must fail.
# kura-test: once
import os, shutil, socket, struct, sys, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import stats, poll_until, kura_only

KB = 1024
KEY = b"big"


def value_of(n, tag):
    """n bytes that differ from any other tag's at every 8th byte."""
    unit = (b"%s-%07d" % (tag, 0))[:8]
    out = bytearray(unit * (n // 8 + 1))[:n]
    for i in range(0, n, 4096):
        out[i:i + 7] = b"%07d" % (i // 4096)
    return bytes(out)


# -- the three protocols: a get request, and its reply parsed from buf[pos:] --

def text_req(key):
    return b"get " + key + b"\r\n"


def value_after(buf, pos, miss, head, tail):
    """A reply of a line (miss, or head + the value's length) and the value
    with tail after it: (value or None, next pos), or None when buf holds
    less than a reply."""
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        return None
    line = buf[pos:nl + 2]
    if line == miss:
        return None, nl + 2
    assert line.startswith(head), "bad reply line %r" % line[:80]
    n, at = int(line[len(head):-2]), nl + 2
    if len(buf) < at + n + len(tail):
        return None
    assert buf[at + n:at + n + len(tail)] == tail, "bad value end %r" % buf[at + n:][:20]
    return buf[at:at + n], at + n + len(tail)


def text_parse(buf, pos, key):
    return value_after(buf, pos, b"END\r\n", b"VALUE " + key + b" 0 ", b"\r\nEND\r\n")


def meta_req(key):
    return b"mg " + key + b" v\r\n"


def meta_parse(buf, pos, key):
    return value_after(buf, pos, b"EN\r\n", b"VA ", b"\r\n")


def bin_req(key):
    return struct.pack(">BBHBBHIIQ", 0x80, 0x00, len(key), 0, 0, 0, len(key), 0, 0) + key


def bin_parse(buf, pos, key):
    if len(buf) < pos + 24:
        return None
    magic, op, klen, elen, _, status, blen, _, _ = struct.unpack(">BBHBBHIIQ",
                                                                  buf[pos:pos + 24])
    assert magic == 0x81 and op == 0x00 and klen == 0, "bad header %r" % buf[pos:pos + 24]
    end = pos + 24 + blen
    if len(buf) < end:
        return None
    if status == 1:
        assert buf[pos + 24:end] == b"Not found", "bad miss body"
        return None, end
    assert status == 0 and elen == 4 and buf[pos + 24:pos + 28] == b"\0\0\0\0", "bad hit"
    return buf[pos + 28:end], end


PROTOS = {"text": (text_req, text_parse), "meta": (meta_req, meta_parse),
          "binary": (bin_req, bin_parse)}


class Scenario:
    """One slow client's pipelined gets of KEY while another client
    overwrites and deletes it."""

    def __init__(self, test, server, proto, size):
        self.t, self.server, self.size = test, server, size
        self.req, self.parse = PROTOS[proto]
        self.old, self.new = value_of(size, b"O"), value_of(size, b"N")
        # (the server's send buffer holds 16 KiB: each reply goes out in
        # many partial sends, the first one's while the key changes)
        self.count = 8

    def stat(self, name):
        with self.server.conn() as c:
            return int(stats(c).get(name, "0"))

    def set(self, c, val):
        self.t.assertEqual(c.request(b"set %s 0 0 %d\r\n%s\r\n" % (KEY, len(val), val)),
                           b"STORED\r\n")

    def run(self, held_shows=True):
        """The slow client's values, in order (None: a miss)."""
        with self.server.conn() as c:
            self.set(c, self.old)
            hits = self.stat("tree_value_cache_hits")
            slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            slow.connect(("127.0.0.1", self.server.port))
            try:
                slow.sendall(self.req(KEY) * self.count)
                if held_shows:
                    poll_until(lambda: self.stat("tree_value_cache_held_bytes") > 0,
                               what="a value held for the slow client")
                else:           # (the hook releases at once: the gets ran)
                    poll_until(lambda: self.stat("tree_value_cache_hits") > hits,
                               what="the slow client's gets answered")
                self.set(c, self.new)
                self.t.assertEqual(c.request(b"delete " + KEY + b"\r\n"), b"DELETED\r\n")
                return self.read_all(slow)
            finally:
                slow.close()

    def read_all(self, slow):
        buf, pos, got = b"", 0, []
        end = kuratest.deadline(60)
        slow.settimeout(10 * kuratest.SCALE)
        while len(got) < self.count:
            r = self.parse(buf, pos, KEY)
            if r is not None:
                got.append(r[0])
                pos = r[1]
                continue
            if kuratest.time.monotonic() > end:
                raise AssertionError("replies not read by the deadline")
            d = slow.recv(4096)
            if not d:
                raise kuratest.Closed(buf[pos:pos + 200])
            buf += d
        return got

    def check(self, got):
        """Old values, then new ones or misses: nothing else."""
        names = [("old" if v == self.old else "new" if v == self.new else
                  "miss" if v is None else "CORRUPT") for v in got]
        self.t.assertNotIn("CORRUPT", names, "a value neither old nor new")
        self.t.assertEqual(names[0], "old", names)
        first_other = next((i for i, n in enumerate(names) if n != "old"), len(names))
        self.t.assertNotIn("old", names[first_other:], names)


# KURA_TEST_SNDBUF: a send buffer of 16 KiB (the kernel's grows to 4 MiB,
# which would take a reply whole, and then no value is held)
SNDBUF = {"KURA_TEST_SNDBUF": "8192"}
TREE = dict(db="%t/data.kb", memory_mb=64, item_max="2m", threads=2, env=SNDBUF)


@kura_only
class ValueRefs(kuratest.ServerTestCase):
    SERVER_OPTS = TREE

    def scenario(self, proto, size):
        sc = Scenario(self, self.server, proto, size)
        sc.check(sc.run())
        poll_until(lambda: sc.stat("tree_value_cache_held_bytes") == 0,
                   what="every hold released")

    def test_text_20k(self):
        self.scenario("text", 20 * KB)

    def test_text_1m(self):
        self.scenario("text", 1024 * KB)

    def test_meta_20k(self):
        self.scenario("meta", 20 * KB)

    def test_meta_1m(self):
        self.scenario("meta", 1024 * KB)

    def test_binary_20k(self):
        self.scenario("binary", 20 * KB)

    def test_binary_1m(self):
        self.scenario("binary", 1024 * KB)

    def test_multiget_bounded(self):
        """A multi-get of many large values held by reference: the server
        holds no more than its output bound (64 KiB) plus a value or so
        for a client that reads nothing."""
        sc = Scenario(self, self.server, "text", 20 * KB)
        with self.server.conn() as c:
            sc.set(c, sc.old)
            slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            slow.connect(("127.0.0.1", self.server.port))
            try:
                slow.sendall(b"get" + b" big" * 500 + b"\r\n")
                poll_until(lambda: sc.stat("tree_value_cache_held_bytes") > 0,
                           what="a value held")
                # the session paused at its bound; the held bytes stay under it
                held = sc.stat("tree_value_cache_held_bytes")
                self.assertLessEqual(held, 64 * KB + 20 * KB, held)
            finally:
                slow.close()
        poll_until(lambda: sc.stat("tree_value_cache_held_bytes") == 0,
                   what="the holds of a closed connection released")


@kura_only
class NegativeEarlyRelease(unittest.TestCase):
    """The hold released at once: the slow client must meet freed bytes."""

    def bad(self, proto, size):
        env = dict(SNDBUF, KURA_TEST_VREF_EARLY="1", MALLOC_PERTURB_="165")
        env.update({
               "ASAN_OPTIONS": (os.environ.get("ASAN_OPTIONS", "") +
                                ":max_free_fill_size=4194304:free_fill_byte=165").lstrip(":")})
        server = kuratest.Server(**dict(TREE, env=env))
        try:
            sc = Scenario(self, server, proto, size)
            try:
                sc.check(sc.run(held_shows=False))
            except (AssertionError, kuratest.Closed, OSError) as e:
                print("# %s %d: failed as it must: %s" % (proto, size, str(e)[:150]))
                return True
            return None
        finally:
            server.stop(check=False)
            shutil.rmtree(server.tmpdir, ignore_errors=True)

    def test_text_20k_early_release_fails(self):
        self.assertIsNotNone(self.bad("text", 20 * KB),
                             "the slow client read the old value intact without the hold")

    def test_binary_1m_early_release_fails(self):
        self.assertIsNotNone(self.bad("binary", 1024 * KB),
                             "the slow client read the old value intact without the hold")


if __name__ == "__main__":
    kuratest.main()
