#!/usr/bin/python3
# kura-test: once
"""test_warm.py - the in-memory cache's warm restart (-e FILE, memcached's
memory file): docs/options.md, docs/design.md "The in-memory cache".

  Graceful    items set (flags, exptimes), one deleted and one replaced,
              then SIGTERM: a kurad started with the same -e, -m and -I
              serves every item with its value, flags, exptime and cas, the
              deleted one stays gone, a new set gets a cas above every old
              one, and the log says "warm restart"; stopped again with
              SIGUSR1, it comes back a second time.
  Crash       kill -9, then a start on the file: empty, and one log line
              says why (no clean-shutdown header).  This is the negative
              check: the same restart without the graceful stop finds
              nothing, so the items above came from the file.
  Settings    a graceful stop, then a start with another -m: empty, with
              the line "settings differ".
"""
import os, signal, sys, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, kura_only, poll_until, stats

N = 2000


def start(path, log, memory_mb=16):
    return Server(kind="kurad", db="*", memory_mb=memory_mb, kura_args=["-e", path, "-log", log])


def fill(c):
    for i in range(N):
        exp = 0 if i % 2 else 100000
        assert c.request(b"set k%d %d %d 3\r\nv%02d\r\n" % (i, i % 5, exp, i % 100)) == b"STORED\r\n"
    assert c.request(b"delete k5\r\n") == b"DELETED\r\n"
    assert c.request(b"set k6 9 0 3\r\nnew\r\n") == b"STORED\r\n"


def snapshot(c):
    """Every key's gets reply."""
    return {i: c.request(b"gets k%d\r\n" % i) for i in range(N)}


def log_has(path, text):
    with open(path) as f:
        return text in f.read()


class Warm(unittest.TestCase):
    def setUp(self):
        self.dir = Server(kind="kurad", start=False).tmpdir
        self.file = os.path.join(self.dir, "kura.mem")
        self.log = os.path.join(self.dir, "kurad.log")

    @kura_only
    def test_graceful_restart(self):
        s = start(self.file, self.log)
        with s.conn() as c:
            fill(c)
            before = snapshot(c)
        self.assertEqual(before[5], b"END\r\n")
        self.assertTrue(before[6].startswith(b"VALUE k6 9 3 "))
        s.stop()                                    # SIGTERM
        s = start(self.file, self.log)
        with s.conn() as c:
            self.assertEqual(snapshot(c), before)
            self.assertEqual(int(stats(c)["curr_items"]), N - 1)
            self.assertEqual(c.request(b"mg k2 t f v\r\n"), b"VA 3 t%s f2\r\nv02\r\n"
                             % c.request(b"mg k2 t\r\n")[4:-2])
            old_max = max(int(r.split(b"\r\n")[0].split()[4]) for r in before.values()
                          if r.startswith(b"VALUE"))
            self.assertEqual(c.request(b"set fresh 0 0 1\r\nx\r\n"), b"STORED\r\n")
            cas = int(c.request(b"gets fresh\r\n").split(b"\r\n")[0].split()[4])
            self.assertGreater(cas, old_max)
        self.assertTrue(log_has(self.log, "warm restart: %d items" % (N - 1)))
        s.proc.send_signal(signal.SIGUSR1)          # memcached's graceful stop
        poll_until(lambda: s.proc.poll() is not None, timeout=20, what="kurad stops on SIGUSR1")
        s = start(self.file, self.log)
        with s.conn() as c:
            self.assertEqual(c.request(b"get k7 fresh\r\n"),
                             b"VALUE k7 2 3\r\nv07\r\nVALUE fresh 0 1\r\nx\r\nEND\r\n")
        s.stop()

    @kura_only
    def test_crash_starts_empty(self):
        s = start(self.file, self.log)
        with s.conn() as c:
            fill(c)
        s.kill9()
        s = start(self.file, self.log)
        with s.conn() as c:
            self.assertEqual(int(stats(c)["curr_items"]), 0)
            self.assertEqual(c.request(b"get k1\r\n"), b"END\r\n")
        s.stop()
        self.assertTrue(log_has(self.log, "no clean-shutdown header"))

    @kura_only
    def test_other_settings_start_empty(self):
        s = start(self.file, self.log)
        with s.conn() as c:
            fill(c)
        s.stop()
        s = start(self.file, self.log, memory_mb=32)
        with s.conn() as c:
            self.assertEqual(int(stats(c)["curr_items"]), 0)
        s.stop()
        self.assertTrue(log_has(self.log, "settings differ"))


if __name__ == "__main__":
    kuratest.main()
