#!/usr/bin/python3
# kura-test: once
# A hash file ten times larger than the memory it is given (issue 23, item
# 7): kurad runs in a memory cgroup of 32 MiB (cgroup v2's memory.max or v1's
# memory.limit_in_bytes, which count the page cache its file pages take as
# well as its heap), is loaded with 320 MiB of 4,000-byte values, and still
# serves every sampled key with its value, before and after a restart in
# the same cgroup.  The cgroup's own counters show the cap was reached (the
# kernel took pages back to stay under it).
#
# The server stops within the harness's 10 s of SIGTERM meanwhile: the
# expiry sweep, which reads records on the main thread, works in slices.
#
# Negative check: the in-memory cache given the same load in the same kind
# of cgroup is killed by the kernel: the cap is real, and what lets the hash
# file live under it is that its data leaves memory.
#
# Not applicable (skipped as such): not root, no writable memory cgroup, a
# data directory on tmpfs (its pages cannot leave memory), or kurad built
# with a sanitizer (its shadow memory alone passes the cap).
import hashlib, os, random, shutil, subprocess, sys, tempfile, time, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, Conn, poll_until, kura_only

MB = 1024 * 1024
CAP = 32 * MB
VALUE = 4000
ITEMS = 10 * CAP // VALUE + 1           # ten times the cap in values alone
SAMPLE = 300


def value(i):
    h = hashlib.sha256(b"%d" % i).digest()
    return (h * (VALUE // len(h) + 1))[:VALUE]


def key(i):
    return b"big%07d" % i


class MemoryCgroup:
    """A memory cgroup of `limit` bytes, v2 or v1, whichever is writable here.
    create() returns None, or the reason it cannot be made."""

    def __init__(self, limit):
        self.limit, self.path, self.v2 = limit, None, False
        self.no_swap = False            # swap counted in the cap too

    def _mounts(self):
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype, opts = line.split()[:4]
                yield mnt, fstype, opts.split(",")

    def create(self):
        if os.geteuid() != 0:
            return "needs root to make a memory cgroup"
        name = "kuratest-%d-%d" % (os.getpid(), int(time.monotonic() * 1000))
        for mnt, fstype, opts in self._mounts():
            if fstype == "cgroup2":
                try:
                    with open(os.path.join(mnt, "cgroup.controllers")) as f:
                        if "memory" not in f.read().split():
                            continue
                    with open(os.path.join(mnt, "cgroup.subtree_control")) as f:
                        on = "memory" in f.read().split()
                    if not on:
                        with open(os.path.join(mnt, "cgroup.subtree_control"), "w") as f:
                            f.write("+memory")
                    path = os.path.join(mnt, name)
                    os.mkdir(path)
                    self.path, self.v2 = path, True
                    self._write("memory.max", str(self.limit))
                    if os.path.exists(os.path.join(path, "memory.swap.max")):
                        self._write("memory.swap.max", "0")
                    self.no_swap = True
                    return None
                except OSError:
                    self.remove()
                    continue
            if fstype == "cgroup" and "memory" in opts:
                try:
                    path = os.path.join(mnt, name)
                    os.mkdir(path)
                    self.path = path
                    self._write("memory.limit_in_bytes", str(self.limit))
                    if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                        self._write("memory.memsw.limit_in_bytes", str(self.limit))
                        self.no_swap = True
                    return None
                except OSError as e:
                    self.remove()
                    return "cannot make a v1 memory cgroup: %s" % e
        return "no writable memory cgroup (v2 with the memory controller, or v1's)"

    def _write(self, name, text):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(text)

    def _read(self, name):
        try:
            with open(os.path.join(self.path, name)) as f:
                return f.read()
        except OSError:
            return ""

    def add(self, pid):
        self._write("cgroup.procs", str(pid))

    def peak(self):
        """The most the cgroup held, in bytes (0 where the kernel does not
        say: v2 before Linux 5.19)."""
        return int(self._read("memory.peak" if self.v2 else "memory.max_usage_in_bytes") or 0)

    def reached(self):
        """Whether usage reached the cap (the kernel took pages back to stay
        under it): v2 counts it in memory.events' "max"; v1 shows it in its
        failure counts or its peak usage (with swap capped too, reclaim
        comes before a charge fails, and failcnt stays 0)."""
        if self.v2:
            for line in self._read("memory.events").splitlines():
                k, v = line.split()
                if k == "max" and int(v) > 0:
                    return True
        elif int(self._read("memory.failcnt") or 0) + int(self._read("memory.memsw.failcnt") or 0):
            return True
        return self.peak() >= self.limit * 9 // 10

    def oom_kills(self):
        name = "memory.events" if self.v2 else "memory.oom_control"
        for line in self._read(name).splitlines():
            k, v = line.split()
            if k == "oom_kill":
                return int(v)
        return 0

    def remove(self):
        if self.path:
            end = kuratest.deadline(10)
            while time.monotonic() < end:
                try:
                    os.rmdir(self.path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)        # its last process is still exiting
            self.path = None


def fs_type(path):
    p = subprocess.run(["stat", "-f", "-c", "%T", path], stdout=subprocess.PIPE, text=True)
    return p.stdout.strip()


def load(port, n, stop_when_dead=None, exptime=0):
    """Sets n values, 64 to a round trip.  Returns the number stored; stops
    early when the server closes (stop_when_dead) or raises otherwise."""
    c = Conn(port, timeout=60)
    stored = 0
    try:
        for base in range(0, n, 64):
            batch = range(base, min(base + 64, n))
            c.send(b"".join(b"set %s 0 %d %d\r\n%s\r\n" % (key(i), exptime, VALUE, value(i))
                           for i in batch))
            for _ in batch:
                line = c.line()
                if line != b"STORED\r\n":
                    raise AssertionError("set %d: %r" % (stored, line))
                stored += 1
    except (kuratest.Closed, ConnectionError, OSError):
        if not stop_when_dead:
            raise
    finally:
        c.close()
    return stored


def check_sample(port, n):
    rng = random.Random(23)
    bad = []
    with Conn(port, timeout=60) as c:
        for i in rng.sample(range(n), SAMPLE):
            got = c.request(b"get %s\r\n" % key(i))
            want = b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key(i), VALUE, value(i))
            if got != want:
                bad.append(i)
    return bad


@kura_only
class BiggerThanRam(unittest.TestCase):
    def setUp(self):
        if kuratest.sanitized():
            self.skipTest(kuratest.not_applicable("kurad built with a sanitizer: its shadow memory alone passes a 32 MiB cap"))
        self.cg = MemoryCgroup(CAP)
        why = self.cg.create()
        if why:
            self.skipTest(kuratest.not_applicable(why))
        self.addCleanup(self.cg.remove)

    def start_in_cgroup(self, db, memory_mb=None):
        s = Server(kind="kurad", threads=2, db=db, memory_mb=memory_mb, start=False)
        s.start()
        self.addCleanup(s.stop, False)      # before the cgroup's removal (cleanups run last first)
        self.cg.add(s.proc.pid)
        return s

    def test_hash_file_ten_times_the_cap(self):
        d = tempfile.mkdtemp(prefix="kuratest-bigram-")
        self.addCleanup(shutil.rmtree, d, True)
        if fs_type(d) == "tmpfs":
            self.skipTest(kuratest.not_applicable("the data directory is on tmpfs, whose pages cannot leave memory"))
        db = os.path.join(d, "data.kh") + "#bnum=65536"
        s = self.start_in_cgroup(db)
        # every item with an expiry time (a day away): the expiry sweep
        # has work, each entry it examines a record read from the disk
        self.assertEqual(load(s.port, ITEMS, exptime=86400), ITEMS)
        on_disk = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
        print("# %d values of %d bytes: %.0f MiB on disk, cap %d MiB, peak %.1f MiB"
              % (ITEMS, VALUE, on_disk / MB, CAP // MB, self.cg.peak() / MB))
        self.assertGreaterEqual(on_disk, 10 * CAP)
        self.assertTrue(self.cg.reached(), "the cap never bit: the test proves nothing")
        self.assertEqual(check_sample(s.port, ITEMS), [])
        self.assertTrue(s.alive())
        # the stop is taken at once: the sweep works in slices of 5 ms on
        # the main thread (a budget of 2,000 records held it for 46 s here)
        s.stop()
        # a restart in the same cgroup: the index from the checkpoint
        s = self.start_in_cgroup(db)
        self.assertEqual(check_sample(s.port, ITEMS), [])
        self.assertEqual(self.cg.oom_kills(), 0)
        s.stop()

    def test_cache_is_killed_negative(self):
        with open("/proc/swaps") as f:
            swap_on = len(f.read().splitlines()) > 1
        if swap_on and not self.cg.no_swap:
            self.skipTest(kuratest.not_applicable("swap is on and this cgroup cannot cap it: the cache would swap, not die"))
        s = self.start_in_cgroup("*", memory_mb=1024)
        stored = load(s.port, ITEMS, stop_when_dead=True)
        poll_until(lambda: not s.alive(), timeout=30 * kuratest.SCALE,
                   what="the cache killed by the cgroup's cap")
        print("# the cache stored %d values (%.0f MiB) before the kernel killed it"
              % (stored, stored * VALUE / MB))
        self.assertLess(stored, ITEMS)
        self.assertGreater(self.cg.oom_kills(), 0)
        s.stop(check=False)


if __name__ == "__main__":
    kuratest.main()
