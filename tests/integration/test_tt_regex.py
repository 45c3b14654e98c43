#!/usr/bin/python3
# Tokyo Tyrant's `misc regex` cannot stop a worker (issue 33, item 6).
#
# ttserver matches with libc's backtracking regexec: a back-reference
# pattern such as (.*)(.*)(.*)(.*)(.*)\5\4\3\2\1x held a kura worker for
# 12.5 s on one 48-byte key, and every connection on that worker waited.
# kura now matches with its own linear-time matcher (src/util/ere.c),
# refuses back-references, and slices the walk by the matcher's steps
# (TT_WALK_STEPS, tt_walk.c), so another client on the same worker waits
# at most one slice (a few milliseconds) however costly the pattern.
#
#  * The back-reference pattern is refused at once (status 1, no records).
#  * With one worker, one client runs a costly pattern (a program of
#    about 800 instructions, every key walked to its end) over 3000 keys
#    of 250 bytes (3 s of matching on an idle machine) while another sends
#    gets one at a time: every get is answered within 50 ms of the
#    server's CPU time, measured as the CPU kurad's threads ran between
#    the get's send and its reply (/proc/PID/task/*/schedstat, in ns).
#    This is a property, not a timing flake: a get waits at most one
#    slice (about a millisecond of matching plus one key's millisecond)
#    and the walk is a thousand times longer, so a get waits either a
#    slice or the whole walk, and the bound (50 ms times the suite's
#    deadline scale, for sanitizer builds) sits between the two with a
#    factor of ten or more each side.  CPU time, not the wall clock: on a
#    loaded machine (load average 12 on 2 cores under `make test`) the
#    scheduler alone kept a sliced get waiting up to a second of wall
#    time, while the CPU the server spent before answering stays that of
#    a slice.  The wall-clock figures are printed.
#  * Negative check (RegexInline): kurad with KURA_TEST_LIST_INLINE, which
#    runs the walk whole in one call as before the slices, answers a get
#    sent during the walk only after it: the same measure fails.
import os, struct, sys, threading, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase, kura_only

P = struct.pack
BACKREF = rb"(.*)(.*)(.*)(.*)(.*)\5\4\3\2\1x"
COSTLY = rb"(.?.?.?.?){100}z"                   # ~800 instructions, never matches
KEYS = 3000
BOUND = 0.050 * kuratest.SCALE                  # seconds of kurad's CPU


def elems(*xs):
    return b"".join(P(">I", len(x)) + x for x in xs)


def misc(name, *args):
    return b"\xc8\x90" + P(">III", len(name), 0, len(args)) + name + elems(*args)


def putnr(k, v):
    return b"\xc8\x18" + P(">II", len(k), len(v)) + k + v


def get(k):
    return b"\xc8\x30" + P(">I", len(k)) + k


def key(i):
    return b"a" * 245 + b"%05d" % i


class Regex(ServerTestCase):
    SERVER_OPTS = dict(threads=1)
    ENV = None

    def setUp(self):
        opts = dict(self.SERVER_OPTS, env=self.ENV) if self.ENV else self.SERVER_OPTS
        self.server = self.start_server(**opts)
        self.c = self.server.conn()
        self.addCleanup(self.c.close)
        self.c.send(b"".join(putnr(key(i), b"v") for i in range(KEYS)) +
                    b"\xc8\x80")                # rnum: every putnr before it is done
        self.assertEqual(self.c.recv_exact(9), b"\x00" + P(">Q", KEYS))

    def listing(self, conn, req, timeout=600):
        conn.send(req)
        st = conn.recv_exact(1, timeout=timeout)[0]
        n = struct.unpack(">I", conn.recv_exact(4, timeout=timeout))[0]
        for _ in range(n):
            conn.recv_exact(struct.unpack(">I", conn.recv_exact(4))[0])
        return st, n

    def gets_during(self, pattern):
        """Runs misc regex pattern on a connection of its own while self.c
        sends gets one at a time until the reply is in.  Returns the
        listing's (status, count), its seconds, and each get's seconds."""
        lister = self.server.conn()
        self.addCleanup(lister.close)
        result, done = [], threading.Event()

        def walk():
            t0 = time.monotonic()
            try:
                result.append(self.listing(lister, misc(b"regex", pattern)))
            finally:
                result.append(time.monotonic() - t0)
                done.set()
        t = threading.Thread(target=walk, daemon=True)
        t.start()
        lat, wall = [], []
        while not done.is_set():
            t0, c0 = time.monotonic(), self.server_cpu()
            self.c.send(get(key(len(lat) % KEYS)))
            self.assertEqual(self.c.recv_exact(6, timeout=600), b"\x00" + P(">I", 1) + b"v")
            lat.append(self.server_cpu() - c0)
            wall.append(time.monotonic() - t0)
        t.join()
        self.assertEqual(len(result), 2, "the listing failed")
        print("# gets during the walk: %d; the worst took %.3f s of kurad's CPU, %.3f s of "
              "wall time; the walk %.3f s" % (len(lat), max(lat), max(wall), result[1]))
        return result[0], result[1], lat

    def server_cpu(self):
        """Seconds of CPU kurad's threads have run (schedstat: ns)."""
        total, base = 0, "/proc/%d/task" % self.server.proc.pid
        for tid in os.listdir(base):
            try:
                with open("%s/%s/schedstat" % (base, tid)) as f:
                    total += int(f.read().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                pass                            # a thread that ended meanwhile
        return total / 1e9

    @kura_only
    def test_backref_refused(self):
        self.assertEqual(self.listing(self.c, misc(b"regex", BACKREF)), (1, 0))
        self.assertEqual(self.listing(self.c, misc(b"regex", b"*" + BACKREF)), (1, 0))
        # the same shape without back-references is taken, and matches
        self.assertEqual(self.listing(self.c, misc(b"regex", rb"(.*)(.*)(.*)(.*)(.*)00399$")),
                         (0, 2))

    @kura_only
    def test_other_client_answered(self):
        (st, n), took, lat = self.gets_during(COSTLY)
        self.assertEqual((st, n), (0, 0))
        # the walk was long enough to prove something: many bounds long
        self.assertGreater(took, 20 * BOUND, "the walk took %.3f s" % took)
        self.check_latency(lat, took)

    def check_latency(self, lat, took):
        self.assertGreater(len(lat), 10, "gets during the walk")
        worst = max(lat)
        self.assertLess(worst, BOUND, "a get waited for %.3f s of kurad's CPU during a %.3f s "
                        "regex walk"
                        % (worst, took))


class RegexInline(Regex):
    """The negative check: the walk inline on the worker, as before."""
    ENV = {"KURA_TEST_LIST_INLINE": "1"}

    def check_latency(self, lat, took):
        worst = max(lat)
        self.assertGreater(worst, BOUND, "no get waited for the inline walk (%.3f s)" % took)


if __name__ == "__main__":
    kuratest.main()
