#!/usr/bin/python3
# kura-test: once
"""test_hash_zcomp.py - the hash file's compressed records over the network
(#zcomp=lzo|zlib|bz2, #zmin; issue 12), against the real kurad.

Every test names its own hash file, so the file runs once whatever KURA_DB
says.  Covers: large text-like values set with #zcomp=lzo come back byte for
byte (with small and incompressible values beside them), before and after a
clean restart without the parameter and a SIGKILL and restart under another
codec; hash_zcomp_records counts them; sizes clients see are the values'
own (meta `s` flag, metadump's size=, "bytes" as with zcomp off); append
and touch on a compressed value; kuractl check finds the stopped file
intact.

Environment: KURA_BUILD, KURA_TEST_DEADLINE_SCALE (see lib/kuratest.py).
Standard library only.
"""
import os, random, shutil, subprocess, sys, tempfile
import unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, stats

WORDS = (b"the quick brown fox jumps over a lazy dog while kura keeps every value "
         b"it was given in a log of records and an index in memory ").split()


def text_value(rng, n):
    """Text-like bytes: words in random order (compresses about 3 to 1)."""
    out = bytearray()
    while len(out) < n:
        out += rng.choice(WORDS) + b" "
    return bytes(out[:n])


def get_one(c, key):
    """(flags, value) of key, or None."""
    c.send(b"get %s\r\n" % key)
    hdr = c.line(30)
    if hdr == b"END\r\n":
        return None
    p = hdr.split()
    assert p[:2] == [b"VALUE", key], hdr[:200]
    n = int(p[3])
    data = c.recv_exact(n + 2, 30)
    assert c.line(30) == b"END\r\n"
    return int(p[2]), bytes(data[:n])


class HashZcomp(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kuratest-hzcomp-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.db = os.path.join(self.dir, "data.kh")

    def start(self, params=""):
        s = Server(kind="kurad", db=self.db + params, item_max="2m")
        self.addCleanup(self._cleanup, s)
        return s

    def _cleanup(self, s):
        try:
            s.stop()
        finally:
            shutil.rmtree(s.tmpdir, ignore_errors=True)

    def check_all(self, c, want, when):
        for k, (f, v) in want.items():
            got = get_one(c, k)
            self.assertIsNotNone(got, "%s: %r missing" % (when, k))
            self.assertEqual(got[0], f, "%s: %r flags" % (when, k))
            self.assertTrue(got[1] == v, "%s: %r differs (%d bytes, want %d)"
                            % (when, k, len(got[1]), len(v)))

    def test_set_get_restart(self):
        rng = random.Random(12)
        want = {}
        for i in range(60):
            n = rng.choice([10, 500, 1024, 5000, 20000, 100000, 1000000])
            v = text_value(rng, n) if i % 4 else rng.randbytes(n)
            want[b"k%03d" % i] = (i, v)
        s = self.start("#zcomp=lzo#zmin=1k")
        c = s.conn(timeout=30)
        for k, (f, v) in want.items():
            self.assertEqual(c.request(b"set %s %d 0 %d\r\n%s\r\n" % (k, f, len(v), v)),
                             b"STORED\r\n")
        self.check_all(c, want, "after the sets")
        st = stats(c)
        self.assertGreater(int(st["hash_zcomp_records"]), 0)
        self.assertGreater(int(st["hash_zcomp_saved_bytes"]), 0)
        # sizes clients see are the raw values' lengths
        big = next(k for k, (f, v) in want.items() if len(v) == 20000 and f % 4)
        self.assertEqual(c.request(b"mg %s s v\r\n" % big)[:12], b"VA 20000 s20")
        c.send(b"lru_crawler metadump all\r\n")
        rows = {}
        for line in c.recv_until(b"END\r\n", 30)[:-5].split(b"\n"):
            if line:
                f = dict(x.split(b"=", 1) for x in line.split())
                rows[f[b"key"]] = int(f[b"size"])
        plain = next(k for k, (f, v) in want.items() if len(v) == 20000 and f % 4 == 0)
        self.assertEqual(rows[big], rows[plain], "metadump: a compressed value's size")
        bytes_on = int(st["bytes"])
        # append and touch on a compressed value
        self.assertEqual(c.request(b"append %s 0 0 4\r\ntail\r\n" % big), b"STORED\r\n")
        f, v = want[big]
        want[big] = (f, v + b"tail")
        self.assertEqual(c.request(b"touch %s 0\r\n" % big), b"TOUCHED\r\n")
        self.check_all(c, want, "after append and touch")
        bytes_on += 4
        c.close()
        s.stop()

        # a clean restart with no parameter: records say their own codec
        s = self.start()
        c = s.conn(timeout=30)
        self.check_all(c, want, "after a restart")
        self.assertEqual(int(stats(c)["bytes"]), bytes_on)
        # new writes go plain; then a SIGKILL and a restart under zlib (replay)
        v = text_value(rng, 50000)
        want[b"later"] = (7, v)
        self.assertEqual(c.request(b"set later 7 0 %d\r\n%s\r\n" % (len(v), v)), b"STORED\r\n")
        self.assertEqual(int(stats(c)["hash_zcomp_records"]), 0)
        c.close()
        s.kill9()
        s = self.start("#zcomp=zlib")
        c = s.conn(timeout=30)
        self.check_all(c, want, "after kill -9")
        c.close()
        s.stop()

        # the stopped file checks clean
        kuractl = os.path.join(os.path.dirname(kuratest.kurad_path()), "kuractl")
        p = subprocess.run([kuractl, "check", self.db], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())

    def test_bytes_as_without_zcomp(self):
        rng = random.Random(5)
        vals = [text_value(rng, 30000 + i) for i in range(20)]
        got = []
        for params in ("", "#zcomp=bz2"):
            shutil.rmtree(self.db, ignore_errors=True)
            s = self.start(params)
            c = s.conn(timeout=30)
            for i, v in enumerate(vals):
                self.assertEqual(c.request(b"set v%d 1 0 %d\r\n%s\r\n" % (i, len(v), v)),
                                 b"STORED\r\n")
            st = stats(c)
            got.append((int(st["bytes"]), int(st["curr_items"]),
                        int(st["hash_live_bytes"])))
            c.close()
            s.stop()
        self.assertEqual(got[0][:2], got[1][:2])
        self.assertLess(got[1][2], got[0][2] / 2, "compressed records take less of the log")


if __name__ == "__main__":
    kuratest.main()
