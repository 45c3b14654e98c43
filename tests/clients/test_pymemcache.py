#!/usr/bin/python3
# A real client: Debian's python3-pymemcache (pure Python, text protocol)
# against the server: set/get/get_many/set_many/add/replace/append/prepend/
# gets/cas/incr/decr/delete/delete_many/touch/flush_all/stats/version,
# noreply, values near 1 MB, binary values, and the errors pymemcache raises
# for the server's error replies.
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase

from pymemcache.client.base import Client
from pymemcache import exceptions as pe


class PyMemcache(ServerTestCase):

    def setUp(self):
        ServerTestCase.setUp(self)
        self.mc = Client(("127.0.0.1", self.server.port), connect_timeout=5, timeout=10,
                         default_noreply=False)
        self.addCleanup(self.mc.close)

    def test_set_get(self):
        mc = self.mc
        self.assertTrue(mc.set("a", b"hello"))
        self.assertEqual(mc.get("a"), b"hello")
        self.assertIsNone(mc.get("missing"))
        self.assertTrue(mc.set("f", b"x", flags=12345))
        self.assertEqual(mc.get("f"), b"x")
        self.assertEqual(mc.get_many(["a", "missing", "f"]), {"a": b"hello", "f": b"x"})
        self.assertEqual(mc.set_many({"m%d" % i: b"%d" % i for i in range(100)}), [])
        got = mc.get_many(["m%d" % i for i in range(100)])
        self.assertEqual(got, {"m%d" % i: b"%d" % i for i in range(100)})
        self.assertTrue(mc.set("empty", b""))
        self.assertEqual(mc.get("empty"), b"")

    def test_add_replace_append_prepend(self):
        mc = self.mc
        self.assertTrue(mc.add("k", b"1"))
        self.assertFalse(mc.add("k", b"2"))
        self.assertTrue(mc.replace("k", b"3"))
        self.assertFalse(mc.replace("nope", b"3"))
        self.assertTrue(mc.append("k", b"4"))
        self.assertTrue(mc.prepend("k", b"2"))
        self.assertEqual(mc.get("k"), b"234")
        self.assertFalse(mc.append("nope", b"x"))
        self.assertFalse(mc.prepend("nope", b"x"))

    def test_gets_cas(self):
        mc = self.mc
        mc.set("c", b"v1")
        val, cas = mc.gets("c")
        self.assertEqual(val, b"v1")
        self.assertTrue(mc.cas("c", b"v2", cas))
        self.assertFalse(mc.cas("c", b"v3", cas))          # EXISTS
        self.assertIsNone(mc.cas("nope", b"v3", cas))      # NOT_FOUND
        self.assertEqual(mc.get("c"), b"v2")
        res = mc.gets_many(["c", "nope"])
        self.assertEqual(list(res), ["c"])

    def test_incr_decr(self):
        mc = self.mc
        mc.set("n", b"10")
        self.assertEqual(mc.incr("n", 5), 15)
        self.assertEqual(mc.decr("n", 20), 0)
        self.assertIsNone(mc.incr("nope", 1))
        mc.set("n", b"18446744073709551615")
        self.assertEqual(mc.incr("n", 1), 0)
        mc.set("s", b"abc")
        with self.assertRaises(pe.MemcacheClientError):
            mc.incr("s", 1)

    def test_delete_touch(self):
        mc = self.mc
        mc.set("d", b"1")
        self.assertTrue(mc.delete("d"))
        self.assertFalse(mc.delete("d"))
        mc.set_many({"x": b"1", "y": b"2"})
        self.assertTrue(mc.delete_many(["x", "y", "z"]))
        self.assertEqual(mc.get_many(["x", "y"]), {})
        mc.set("t", b"1")
        self.assertTrue(mc.touch("t", 100))
        self.assertFalse(mc.touch("nope", 100))
        # (pymemcache 3.5 has no gat(); test_basic covers it)

    def test_flush_stats_version(self):
        mc = self.mc
        mc.set("a", b"1")
        self.assertTrue(mc.flush_all())
        self.assertIsNone(mc.get("a"))
        st = mc.stats()
        for k in (b"curr_items", b"cmd_get", b"cmd_set", b"get_hits", b"get_misses", b"uptime"):
            self.assertIn(k, st)
        st = mc.stats("settings")
        self.assertIn(b"maxbytes", st)
        self.assertTrue(mc.version())

    def test_noreply(self):
        mc = Client(("127.0.0.1", self.server.port), default_noreply=True, timeout=10)
        try:
            for i in range(200):
                mc.set("nr%d" % i, b"%d" % i)
            mc.delete("nr0")
            mc.incr("nr1", 5)
            self.assertEqual(mc.get("nr1"), b"6")
            self.assertIsNone(mc.get("nr0"))
            self.assertEqual(mc.get("nr199"), b"199")
        finally:
            mc.close()

    def test_big_and_binary_values(self):
        mc = self.mc
        v = os.urandom(1000 * 1000)
        self.assertTrue(mc.set("big", v))
        self.assertEqual(mc.get("big"), v)
        b = bytes(range(256)) * 4 + b"\r\nEND\r\n"
        mc.set("bin", b)
        self.assertEqual(mc.get("bin"), b)
        with self.assertRaises(pe.MemcacheServerError):
            mc.set("huge", b"x" * (1024 * 1024 + 1))
        self.assertEqual(mc.get("bin"), b)       # connection still in step

    def test_bad_keys_rejected_by_client(self):
        with self.assertRaises(pe.MemcacheIllegalInputError):
            self.mc.set("a" * 251, b"x")
        with self.assertRaises(pe.MemcacheIllegalInputError):
            self.mc.set("a b", b"x")
        self.assertTrue(self.mc.set("a" * 250, b"x"))
        self.assertEqual(self.mc.get("a" * 250), b"x")


if __name__ == "__main__":
    kuratest.main()
