#!/usr/bin/python3
# kura-test: once
# The in-memory cache as a cache, checked for function, never timed (issue
# 35; bench/cache.py has the figures):
#  * -m is honoured: a fill of three times the limit (1000-byte values)
#    grows the server's RSS by at most 1.5 x the limit + 8 MB, evicts, and
#    keeps the newest keys; negative check: the same fill with a limit large
#    enough to hold it all grows past that bound.
#  * the hit ratio under a Zipf(0.99) load (a get, then a set on a miss) at
#    -m 8 is not far below memcached's in the same run: at most 8 points
#    below it (main's cache and issue 35's were within half a point of it
#    when this was written); both servers must have evicted.  Negative
#    check: the same load against kurad at -m 1 falls below the bound (19
#    to 26 points below memcached).  A ratio: load does not make it flaky.
#  * a warm restart (-e FILE, as memcached's), where kurad takes -e: a
#    graceful stop (SIGTERM) and a start with the same file give the items
#    back; after kill -9 it starts empty.  Skipped (not applicable) for a
#    kurad whose -h lists no -e.
# Run against the cache (cache_only); the memcached comparison is kura-only.
import bisect, os, random, shutil, subprocess, sys, tempfile, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, stats, rss, cache_only, kura_only

MB = 1024 * 1024
LIMIT_MB = 16
HIT_SLACK_POINTS = 8.0


def fence(c):
    """A round trip after noreply commands: every one before it is done."""
    c.send(b"version\r\n")
    line = c.line(timeout=60)
    assert line.startswith(b"VERSION"), line


def fill(server, n, vsize, prefix=b"f:"):
    val = b"v" * vsize
    with server.conn(timeout=60) as c:
        batch = []
        for i in range(n):
            batch.append(b"set %s%d 0 0 %d noreply\r\n%s\r\n" % (prefix, i, vsize, val))
            if len(batch) == 1000:
                c.send(b"".join(batch))
                batch = []
        c.send(b"".join(batch))
        fence(c)


class ZipfLoad:
    """A deterministic Zipf(s) stream over n keys (ranks spread over the key
    space by a fixed multiplier), played as cache-aside: each batch of keys
    is one multi-get, the misses then set with noreply before the next."""

    def __init__(self, n, s=0.99, seed=7):
        w, acc = [], 0.0
        for r in range(1, n + 1):
            acc += r ** -s
            w.append(acc)
        self.cdf = [x / acc for x in w]
        self.n, self.rng = n, random.Random(seed)

    def keys(self, count):
        out = []
        for _ in range(count):
            rank = min(bisect.bisect_left(self.cdf, self.rng.random()), self.n - 1)
            out.append(b"z:%d" % (rank * 7919 % self.n))
        return out

    def play(self, server, warmup, requests, vsize=300, batch=100):
        """The hit ratio of the requests after the warm-up."""
        val = b"v" * vsize
        hits = counted = 0
        with server.conn(timeout=60) as c:
            pending = b""
            done = 0
            while done < warmup + requests:
                ks = self.keys(min(batch, warmup + requests - done))
                c.send(pending + b"get " + b" ".join(ks) + b"\r\n")
                got = set()
                while True:
                    line = c.line(timeout=60)
                    if line == b"END\r\n":
                        break
                    parts = line.split()
                    assert parts[0] == b"VALUE", line
                    c.recv_exact(int(parts[3]) + 2, timeout=60)
                    got.add(parts[1])
                sets, seen = [], set()
                for k in ks:
                    hit = k in got or k in seen     # a repeat: set just before
                    if not hit:
                        seen.add(k)
                        sets.append(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, vsize, val))
                    if done >= warmup:
                        counted += 1
                        hits += hit
                    done += 1
                pending = b"".join(sets)
            c.send(pending)
            fence(c)
        return hits / counted


def takes_e():
    p = subprocess.run([kuratest.kurad_path(), "-h"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return any(line.split()[:1] == ["-e"] for line in p.stdout.splitlines())


class MemoryLimit(unittest.TestCase):
    def setUp(self):
        if kuratest.sanitized():
            self.skipTest(kuratest.not_applicable(
                "a sanitizer's heap is not glibc's: RSS says nothing of -m"))

    def grown_by_fill(self, limit_mb):
        s = Server(memory_mb=limit_mb, threads=1)
        self.addCleanup(s.stop)
        before = rss(s)
        n = 3 * LIMIT_MB * MB // 1000
        fill(s, n, 1000)
        grown = rss(s) - before
        with s.conn() as c:
            st = stats(c)
            last = c.request(b"get f:%d\r\n" % (n - 1))
        return grown, n, int(st["curr_items"]), int(st.get("evictions", 0)), last

    @cache_only
    def test_rss_bounded_under_three_times_the_limit(self):
        bound = 1.5 * LIMIT_MB * MB + 8 * MB
        grown, n, items, evictions, last = self.grown_by_fill(LIMIT_MB)
        sys.stdout.write("# -m %d: RSS grew by %.1f MB, %d of %d items held\n"
                         % (LIMIT_MB, grown / MB, items, n))
        self.assertLess(grown, bound, "RSS grew by %.1f MB at -m %d" % (grown / MB, LIMIT_MB))
        self.assertLess(items, n, "nothing evicted: %d items of %d held" % (items, n))
        self.assertGreater(evictions, 0)
        self.assertTrue(last.startswith(b"VALUE "), "the newest key is gone: %r" % last[:60])
        # negative: a limit that holds the whole fill grows past the bound
        grown, n, items, _, _ = self.grown_by_fill(LIMIT_MB * 16)
        sys.stdout.write("# -m %d: RSS grew by %.1f MB\n" % (LIMIT_MB * 16, grown / MB))
        self.assertEqual(items, n)
        self.assertGreater(grown, bound, "the bound would not see a cache holding it all")


class HitRatio(unittest.TestCase):
    KEYS, WARMUP, REQUESTS = 100000, 40000, 60000

    def ratio(self, kind, limit_mb):
        s = Server(kind=kind, memory_mb=limit_mb, threads=1)
        self.addCleanup(s.stop)
        r = ZipfLoad(self.KEYS).play(s, self.WARMUP, self.REQUESTS)
        with s.conn() as c:
            st = stats(c)
        self.assertGreater(int(st.get("evictions", 0)), 0,
                           "%s at -m %d never evicted: the load does not test it"
                           % (kind, limit_mb))
        return r

    @cache_only
    @kura_only
    def test_zipf_hit_ratio_near_memcached(self):
        if not os.access(kuratest.MEMCACHED, os.X_OK):
            self.skipTest(kuratest.missing("memcached (apt-get install memcached)"))
        mc = self.ratio("memcached", 8)
        kura = self.ratio("kurad", 8)
        sys.stdout.write("# hit ratio at -m 8: memcached %.4f, kurad %.4f (%+.2f points)\n"
                         % (mc, kura, 100 * (kura - mc)))
        self.assertGreater(100 * kura, 100 * mc - HIT_SLACK_POINTS)
        # negative: an eighth of the memory falls below the bound
        small = self.ratio("kurad", 1)
        sys.stdout.write("# kurad at -m 1: %.4f\n" % small)
        self.assertLess(100 * small, 100 * mc - HIT_SLACK_POINTS,
                        "kurad at -m 1: %.4f; the bound would not see a poor cache" % small)


class WarmRestart(unittest.TestCase):
    @cache_only
    @kura_only
    def test_items_back_after_a_graceful_stop(self):
        if not takes_e():
            self.skipTest(kuratest.not_applicable("this kurad takes no -e FILE (no warm restart)"))
        d = tempfile.mkdtemp(prefix="kuratest-warm-", dir="/dev/shm"
                             if os.access("/dev/shm", os.W_OK) else None)
        self.addCleanup(shutil.rmtree, d, True)
        args = ["-e", os.path.join(d, "cache")]
        s = Server(memory_mb=64, kura_args=args)
        self.addCleanup(s.stop)
        fill(s, 10000, 100)
        s.stop()
        s = Server(memory_mb=64, kura_args=args)
        self.addCleanup(s.stop)
        with s.conn() as c:
            self.assertEqual(int(stats(c)["curr_items"]), 10000)
            self.assertEqual(c.request(b"get f:1234\r\n"),
                             b"VALUE f:1234 0 100\r\n" + b"v" * 100 + b"\r\nEND\r\n")
        # negative: after kill -9 nothing is trusted, the cache starts empty
        s.kill9()
        s = Server(memory_mb=64, kura_args=args)
        self.addCleanup(s.stop)
        with s.conn() as c:
            self.assertEqual(int(stats(c)["curr_items"]), 0)


if __name__ == "__main__":
    kuratest.main()
