#!/usr/bin/python3
# Keys longer than memcached's 250 bytes, and the empty key, through Tokyo
# Tyrant's protocol
# (docs/options.md, -kmax; docs/protocol.md, "Key lengths"), on the backend
# of the run (KURA_DB), with the client of test_tt.py:
#
#  * put, get, vsiz, mget, the iterator and out of a 1000-byte key answer 0
#    as ttserver does (kura answered 1 before -kmax: its limit was 250);
#    a key one byte past -kmax (default 1024) is answered 1, and -kmax 4096
#    takes a 4096-byte key (the B+ tree: with psiz=16384, as kurad says).
#  * the empty key is stored, read, listed and removed as ttserver does
#    (kura answered 1 before);
#  * such keys survive a restart (the hash file's records, the tree's pages
#    and log; the cache through its snapshot at a clean stop) and reach a
#    replica through the update log.
#  * memcached's protocols still refuse the same key as memcached 1.6 does,
#    byte for byte (text and meta: CLIENT_ERROR bad command line format;
#    test_badinput.py and test_binary.py hold every command's case).
#  * -kmax out of 250..4096 stops kurad at start with exit 2 naming the
#    bounds; a -kmax past what the tree's page size holds names psiz.
import os, shutil, subprocess, sys, tempfile, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, poll_until, not_applicable, kurad_path, SCALE
from test_tt import TT, put, get, out, vsiz, mget, RNUM

SKIP = kuratest.is_memcached()
WHY = not_applicable("Tokyo Tyrant's protocol and -kmax are kurad's")
KIND = kuratest.db_kind()
BADFMT = b"CLIENT_ERROR bad command line format\r\n"


def key(n, c=b"k"):
    return (b"%d-" % n + c * n)[:n]


@unittest.skipIf(SKIP, WHY)
class LongKeys(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kuratest-ttkeys-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def db(self, name, params=""):
        ext = {"hash": ".kh", "tree": ".kb"}.get(KIND)
        return os.path.join(self.dir, name + ext) + params if ext else "*" + params

    def start(self, name="d", params="", args=(), port=None):
        bgs = ["-bgs", os.path.join(self.dir, name + ".bgs"), "-bgsstop"] if KIND == "cache" else []
        s = Server(db=self.db(name, params), kura_args=bgs + list(args), port=port,
                   start_timeout=30)
        self.addCleanup(s.stop, check=False)
        return s

    def tt(self, server):
        t = TT(server)
        self.addCleanup(t.close)
        return t

    def restart(self, s, t):
        """Closes t, stops s cleanly and starts it again on its port: the
        new server and a Tokyo Tyrant connection to it."""
        t.close()
        port = s.port
        s.stop()
        s2 = self.start(port=port)
        return s2, self.tt(s2)

    def check_present(self, t, k, v):
        self.assertEqual(t.value(get(k)), v)
        t.send(vsiz(k))
        self.assertEqual(t.code(), 0)
        self.assertEqual(t.u32(), len(v))

    def test_long_key_put_get_vsiz_out(self):
        s = self.start()
        t = self.tt(s)
        k1000, k1024, k1025 = key(1000), key(1024, b"m"), key(1025, b"n")
        self.assertEqual(t.status(put(k1000, b"v1000")), 0)
        self.check_present(t, k1000, b"v1000")
        self.assertEqual(t.status(put(k1024, b"at the limit")), 0)
        self.check_present(t, k1024, b"at the limit")
        self.assertEqual(t.mget(k1000, k1024, b"absent"), {k1000: b"v1000", k1024: b"at the limit"})
        self.assertEqual(sorted(t.keys()), sorted([k1000, k1024]))
        # one byte past -kmax: no such record can be kept (ttserver has no limit)
        self.assertEqual(t.status(put(k1025, b"v")), 1)
        self.assertEqual(t.status(get(k1025)), 1)
        self.assertEqual(t.status(out(k1000)), 0)
        self.assertEqual(t.status(get(k1000)), 1)
        self.assertEqual(t.status(out(k1000)), 1)
        self.check_present(t, k1024, b"at the limit")
        # memcached's protocols: memcached's refusal, byte for byte
        with s.conn() as c:
            self.assertEqual(c.transcript(b"get " + key(251) + b"\r\n"), BADFMT)
            self.assertEqual(c.transcript(b"get " + k1024 + b"\r\n"), BADFMT)
            self.assertEqual(c.transcript(b"mg " + k1024 + b" v\r\n"), BADFMT)
            self.assertEqual(c.transcript(b"set " + key(251) + b" 0 0 1\r\nx\r\n"),
                             BADFMT + b"ERROR\r\n")
            self.assertEqual(c.transcript(b"get " + key(250) + b"\r\n"), b"END\r\n")

    def test_empty_key(self):
        """The empty key is a key like another, as ttserver 1.1.41 answers
        (put 0, get its value, vsiz, mget, out 0; kura answered 1 before),
        through a restart.  memcached's protocols still cannot name it (a
        text token is never empty; binary answers EINVAL and meta a base64
        key decoding to nothing an error, as memcached: test_binary.py)."""
        s = self.start()
        t = self.tt(s)
        self.assertEqual(t.status(get(b"")), 1)
        self.assertEqual(t.status(put(b"", b"ee")), 0)
        self.check_present(t, b"", b"ee")
        self.assertEqual(t.status(put(b"a", b"1")), 0)
        self.assertEqual(t.mget(b"", b"a"), {b"": b"ee", b"a": b"1"})
        self.assertEqual(sorted(t.keys()), [b"", b"a"])
        self.assertEqual(t.u64(RNUM), 2)
        s2, t2 = self.restart(s, t)
        self.check_present(t2, b"", b"ee")
        self.assertEqual(t2.status(out(b"")), 0)
        self.assertEqual(t2.status(get(b"")), 1)
        self.assertEqual(t2.status(out(b"")), 1)
        self.assertEqual(t2.u64(RNUM), 1)

    def test_kmax_4096(self):
        s = self.start(params="#psiz=16384" if KIND == "tree" else "", args=["-kmax", "4096"])
        t = self.tt(s)
        k = key(4096, b"x")
        self.assertEqual(t.status(put(k, b"longest")), 0)
        self.check_present(t, k, b"longest")
        self.assertEqual(t.status(put(k + b"y", b"v")), 1)

    def test_survives_restart(self):
        s = self.start()
        t = self.tt(s)
        ks = {key(300 + i * 70, bytes([0x41 + i])): b"value %d" % i for i in range(11)}
        for k, v in ks.items():
            self.assertEqual(t.status(put(k, v)), 0)
        s2, t2 = self.restart(s, t)
        for k, v in ks.items():
            self.check_present(t2, k, v)
        self.assertEqual(sorted(t2.keys()), sorted(ks))

    def test_many_long_keys_then_check(self):
        """3,000 keys of 600 to 1,000 bytes (the tree's branches full of long
        separators, split and merged; the hash file's records over several
        hundred bytes of key), half removed, a restart, then kuractl check
        on the stopped database."""
        s = self.start()
        t = self.tt(s)
        ks = [b"%05d-" % i + bytes([0x61 + i % 26]) * (594 + i * 7919 % 401) for i in range(3000)]
        t.send(b"".join(put(k, b"v%d" % i) for i, k in enumerate(ks)))
        self.assertEqual(t.c.recv_exact(3000, timeout=120), b"\x00" * 3000)
        t.send(b"".join(out(k) for k in ks[::2]))
        self.assertEqual(t.c.recv_exact(1500, timeout=120), b"\x00" * 1500)
        self.assertEqual(t.u64(RNUM), 1500)
        s2, t2 = self.restart(s, t)
        self.assertEqual(t2.u64(RNUM), 1500)
        for i in range(1, 3000, 98):        # odd: kept
            self.assertEqual(t2.value(get(ks[i])), b"v%d" % i)
            self.assertEqual(t2.status(get(ks[i - 1])), 1)
        got = t2.keys()
        self.assertEqual(sorted(got), sorted(ks[1::2]))
        if KIND == "tree":
            self.assertEqual(got, sorted(ks[1::2]))     # in key order
        t2.close()
        s2.stop()
        if KIND != "cache":
            p = subprocess.run([os.path.join(os.path.dirname(kurad_path()), "kuractl"), "check",
                                self.db("d")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=120 * SCALE)
            self.assertEqual(p.returncode, 0, p.stdout)

    def test_replica_gets_long_keys(self):
        m = self.start("m", args=["-sid", "1", "-ulog", os.path.join(self.dir, "m.ul")])
        r = self.start("r", args=["-sid", "2", "-ulog", os.path.join(self.dir, "r.ul"),
                                  "-mhost", "127.0.0.1", "-mport", str(m.port)])
        t = self.tt(m)
        k1, k2 = key(1000, b"a"), key(700, b"b")
        self.assertEqual(t.status(put(b"", b"empty")), 0)
        self.assertEqual(t.status(put(k1, b"one")), 0)
        self.assertEqual(t.status(put(k2, b"two")), 0)
        self.assertEqual(t.status(out(k2)), 0)
        tr = self.tt(r)
        poll_until(lambda: tr.value(get(k1)) == b"one", 30 * SCALE, what="the long key on the replica")
        poll_until(lambda: tr.status(get(k2)) == 1, 30 * SCALE, what="its removal on the replica")
        self.assertEqual(tr.value(get(b"")), b"empty")
        self.assertEqual(t.status(out(b"")), 0)
        poll_until(lambda: tr.status(get(b"")) == 1, 30 * SCALE, what="the empty key's removal")


@unittest.skipIf(SKIP, WHY)
class KmaxBounds(unittest.TestCase):
    def run_kurad(self, *args):
        d = tempfile.mkdtemp(prefix="kuratest-kmax-")
        self.addCleanup(shutil.rmtree, d, True)
        user = ["-u", "root"] if os.geteuid() == 0 else []
        a = [kurad_path(), "-port", str(kuratest.free_port())] + user + \
            [x.replace("%t", d) for x in args]
        p = subprocess.run(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=d,
                           timeout=60 * SCALE)
        return p.returncode, p.stderr.decode(errors="replace")

    def test_out_of_bounds_refused(self):
        for bad in ("249", "4097", "0", "x"):
            rc, err = self.run_kurad("-kmax", bad)
            self.assertEqual(rc, 2, err)
            self.assertIn("'-kmax': '%s' is not a number from 250 to 4096" % bad, err)

    def test_tree_page_bounds_kmax(self):
        if KIND != "tree":
            self.skipTest(not_applicable("the B+ tree's page size bounds its keys"))
        rc, err = self.run_kurad("-kmax", "4096", "%t/t.kb#psiz=8192")
        self.assertEqual(rc, 2, err)
        self.assertIn("-kmax 4096: this tree database holds keys of at most 2669 bytes", err)
        self.assertIn("psiz=16384", err)


if __name__ == "__main__":
    kuratest.main()
