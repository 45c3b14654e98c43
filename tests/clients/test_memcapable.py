#!/usr/bin/python3
# memcapable from libmemcached-tools (Debian names it memccapable), the ASCII
# protocol ("-a") and the binary protocol ("-b") each on their own: every one
# of its tests must print [pass] and it must end with "All tests passed".
import os, re, shutil, subprocess, sys, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase

MEMCAPABLE = shutil.which("memcapable") or shutil.which("memccapable")


class MemCapable(ServerTestCase):

    @unittest.skipIf(MEMCAPABLE is None,
                     kuratest.missing("memcapable (apt-get install libmemcached-tools)"))
    def test_memcapable_ascii(self):
        p = subprocess.run([MEMCAPABLE, "-a", "-t", "10", "-h", "127.0.0.1", "-p", str(self.server.port)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = p.stdout.decode("utf-8", "replace")
        results = re.findall(r"^(ascii [\w ]+?)\s+\[(\w+)\]\s*$", out, re.M)
        for name, res in results:
            with self.subTest(memcapable=name):
                self.assertEqual(res, "pass", name)
        self.assertGreaterEqual(len(results), 27, out)       # memcapable 1.1.4 runs 27 ascii tests
        self.assertNotIn("binary", out)
        self.assertIn("All tests passed", out)
        self.assertEqual(p.returncode, 0, out)
        self.check_serving()

    @unittest.skipIf(MEMCAPABLE is None,
                     kuratest.missing("memcapable (apt-get install libmemcached-tools)"))
    def test_memcapable_binary(self):
        p = subprocess.run([MEMCAPABLE, "-b", "-t", "10", "-h", "127.0.0.1", "-p", str(self.server.port)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = p.stdout.decode("utf-8", "replace")
        results = re.findall(r"^(binary [\w ]+?)\s+\[(\w+)\]\s*$", out, re.M)
        for name, res in results:
            with self.subTest(memcapable=name):
                self.assertEqual(res, "pass", name)
        self.assertGreaterEqual(len(results), 27, out)       # memcapable 1.1.4 runs 27 binary tests
        self.assertNotIn("ascii", out)
        self.assertIn("All tests passed", out)
        self.assertEqual(p.returncode, 0, out)
        self.check_serving()


if __name__ == "__main__":
    kuratest.main()
