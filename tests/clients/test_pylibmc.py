#!/usr/bin/python3
# A real client: Debian's python3-pylibmc (libmemcached) against the server,
# over the text protocol (class PyLibmc) and the binary protocol (class
# PyLibmcBinary, binary=True, the same tests): set/get/get_multi/set_multi/
# add/replace/append/prepend/gets/cas/incr/decr/delete/delete_multi/touch/
# flush_all/get_stats, pickled and compressed values (flags), large values,
# and many clients.
import os, sys, threading
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase

import pylibmc


class PyLibmc(ServerTestCase):
    BINARY = False

    def setUp(self):
        ServerTestCase.setUp(self)
        self.mc = self.client()

    def client(self, **behaviors):
        b = {"tcp_nodelay": True, "cas": True, "connect_timeout": 5000,
             "receive_timeout": 10 * 1000 * 1000, "send_timeout": 10 * 1000 * 1000}
        b.update(behaviors)
        mc = pylibmc.Client(["127.0.0.1:%d" % self.server.port], binary=self.BINARY,
                            behaviors=b)
        self.addCleanup(mc.disconnect_all)
        return mc

    def test_set_get(self):
        mc = self.mc
        self.assertTrue(mc.set("a", b"hello"))
        self.assertEqual(mc.get("a"), b"hello")
        self.assertIsNone(mc.get("missing"))
        self.assertEqual(mc.set_multi({"m%d" % i: b"%d" % i for i in range(100)}), [])
        self.assertEqual(mc.get_multi(["m%d" % i for i in range(100)] + ["x"]),
                         {"m%d" % i: b"%d" % i for i in range(100)})
        # python objects go through flags (pickle, int, str)
        mc.set("obj", {"k": [1, 2, 3]})
        self.assertEqual(mc.get("obj"), {"k": [1, 2, 3]})
        mc.set("int", 42)
        self.assertEqual(mc.get("int"), 42)
        mc.set("str", "h\u00e9llo")
        self.assertEqual(mc.get("str"), "h\u00e9llo")

    def test_add_replace_append_prepend(self):
        mc = self.mc
        self.assertTrue(mc.add("k", b"1"))
        self.assertFalse(mc.add("k", b"2"))
        self.assertTrue(mc.replace("k", b"3"))
        if not self.BINARY:
            self.assertFalse(mc.replace("nope", b"3"))
        self.assertTrue(mc.append("k", b"4"))
        self.assertTrue(mc.prepend("k", b"2"))
        self.assertEqual(mc.get("k"), b"234")
        self.assertFalse(mc.append("nope", b"x"))

    def test_gets_cas(self):
        mc = self.mc
        mc.set("c", b"v1")
        val, cas = mc.gets("c")
        self.assertEqual(val, b"v1")
        self.assertTrue(mc.cas("c", b"v2", cas))
        self.assertFalse(mc.cas("c", b"v3", cas))
        self.assertEqual(mc.get("c"), b"v2")
        self.assertEqual(mc.gets("nope"), (None, None))

    def test_incr_decr(self):
        mc = self.mc
        mc.set("n", b"10")
        self.assertEqual(mc.incr("n", 5), 15)
        self.assertEqual(mc.decr("n", 20), 0)
        with self.assertRaises(pylibmc.NotFound):
            mc.incr("nope", 1)
        mc.set("n", b"18446744073709551615")
        self.assertEqual(mc.incr("n", 1), 0)

    def test_delete_touch_flush(self):
        mc = self.mc
        mc.set("d", b"1")
        self.assertTrue(mc.delete("d"))
        self.assertFalse(mc.delete("d"))
        mc.set_multi({"x": b"1", "y": b"2"})
        mc.delete_multi(["x", "y"])
        self.assertEqual(mc.get_multi(["x", "y"]), {})
        mc.set("t", b"1")
        self.assertTrue(mc.touch("t", 100))
        self.assertFalse(mc.touch("nope", 100))
        self.assertTrue(mc.flush_all())
        self.assertIsNone(mc.get("t"))

    def test_stats(self):
        self.mc.set("a", b"1")
        st = self.mc.get_stats()
        self.assertEqual(len(st), 1)
        name, d = st[0]
        for k in ("curr_items", "cmd_get", "cmd_set", "pid", "version", "limit_maxbytes"):
            self.assertIn(k, d)

    def test_large_and_compressed(self):
        mc = self.mc
        v = os.urandom(900 * 1000)
        self.assertTrue(mc.set("big", v))
        self.assertEqual(mc.get("big"), v)
        z = b"abc" * 100000                       # compressed by pylibmc (zlib flag)
        self.assertTrue(mc.set("z", z, min_compress_len=1000))
        self.assertEqual(mc.get("z"), z)
        with self.assertRaises(pylibmc.Error):
            mc.set("huge", os.urandom(2 * 1024 * 1024))
        self.assertEqual(mc.get("z"), z)

    def test_threads_with_client_pool(self):
        errors = []

        def work(n):
            try:
                mc = self.mc.clone()
                for i in range(100):
                    k = "t%d_%d" % (n, i)
                    mc.set(k, b"%d" % i)
                    if mc.get(k) != b"%d" % i:
                        errors.append(k)
                mc.disconnect_all()
            except Exception as e:
                errors.append(repr(e))
        ts = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])


class PyLibmcBinary(PyLibmc):
    BINARY = True

    def test_binary_misses(self):
        # libmemcached reports a binary miss as NotFound where the text
        # protocol's NOT_STORED is a False
        mc = self.mc
        with self.assertRaises(pylibmc.NotFound):
            mc.replace("nope", b"3")
        self.assertFalse(mc.add("nope", b"1") is False)
        self.assertFalse(mc.add("nope", b"2"))
        self.assertEqual(mc.get("nope"), b"1")

if __name__ == "__main__":
    kuratest.main()
