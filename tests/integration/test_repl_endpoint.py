#!/usr/bin/python3
# kura-test: once
"""test_repl_endpoint.py - the replication endpoint is bounded (docs/
replication.md, "The endpoint's limits"): any client of the port can send
"repl", so a flood of them must not take the server down, and what a
stream claims is checked.  Streams here are raw sockets (fake replicas),
most of which read nothing.

  Flood        streams past -repl-max are refused with SERVER_ERROR and
               counted; the server's thread count stays flat (one loop
               serves them all).  Negative: with the cap lifted the same
               flood is taken.
  -c           streams count against -c while they last: past it a new
               client gets memcached's "ERROR Too many open connections";
               when the streams end, clients are served again.  Negative:
               with a larger -c the same client is served.
  Copy flood   on a small update-log disk (a tmpfs): concurrent full
               copies share one spool, past COPIES_MAX they are refused,
               and a copy that would not leave the update log its room is
               refused with "no room"; the master's writes never fail.
               Negative: the same copy is taken where there is room.
  ACK spoof    "repl <huge> 9" (a position past the log) is not taken as
               held; an ACK beyond the rows sent ends the stream; neither
               satisfies -syncrepl.  Two streams of one server id count
               once.  Negative: a fake replica that acks what it was sent,
               and two distinct ids, satisfy it.
  Server ids   0, 65536, 2^32 and the master's own are refused; 65535 is
               taken; -sid 0 and -sid 65536 stop kurad with exit 2.
  Stats        repl_replicas, repl_streams_refused, repl_max and
               repl_replica_<sid> with its serving port, state, acked,
               sent, lag_rows and lag_us ("unknown" until known).
"""
import os, re, select, shutil, socket, subprocess, sys, tempfile, threading, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase, Server, poll_until, kura_only, stats

MB = 1 << 20
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_repl import decode_rows, MARK  # the row format's reader


def threads(server):
    with open("/proc/%d/status" % server.proc.pid) as f:
        for ln in f:
            if ln.startswith("Threads:"):
                return int(ln.split()[1])
    raise AssertionError("no Threads line")


def last_ts(server):
    with server.conn() as c:
        return int(stats(c)["ulog_last_ts"])


class Stream:
    """A fake replica: sends its request, reads the first line."""

    def __init__(self, port, request, read_first=True, timeout=15):
        # a small receive buffer (set before connecting, so the window is
        # small too): a peer that reads nothing holds little in the kernel
        self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.s.settimeout(timeout * kuratest.SCALE)
        self.s.connect(("127.0.0.1", port))
        self.s.sendall(request)
        self.after = int(request.split()[1])
        self.buf = b""
        self.first = self.line() if read_first else None

    def line(self):
        while b"\r\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise kuratest.Closed(self.buf)
            self.buf += d
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def rows_until_heartbeat(self, timeout=15):
        """The rows sent until the stream caught up: a heartbeat (they come
        every second, after the rows queued) naming no row newer than the
        last one received."""
        rows, end, newest = [], kuratest.deadline(timeout), 0
        while time.monotonic() < end:
            got, self.buf = decode_rows(self.buf)
            for r in got:
                if r["type"] == MARK:
                    if r["ts"] <= max(newest, self.after):
                        return rows
                    continue
                rows.append(r)
                newest = max(newest, r["ts"])
            d = self.s.recv(1 << 20)
            assert d, "stream closed"
            self.buf += d
        raise AssertionError("no heartbeat")

    def closed(self, timeout=10):
        """True once the master closed it (what it sent before is dropped)."""
        end = kuratest.deadline(timeout)
        self.s.settimeout(0.2)
        while time.monotonic() < end:
            try:
                d = self.s.recv(1 << 20)
            except socket.timeout:
                continue
            except OSError:
                return True
            if not d:
                return True
        return False

    def close(self):
        self.s.close()


@kura_only
class Endpoint(ServerTestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kuratest-replep-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def master(self, args=(), name="m", ulog=None, **kw):
        d = os.path.join(self.dir, name)
        s = Server(db=d + ".kh", kura_args=["-sid", "1", "-ulog", ulog or d + ".ul"] + list(args),
                   **kw)
        self.addCleanup(s.stop, check=False)
        return s

    def stream(self, port, sid, after=None, extra=b"", read_first=True):
        line = b"repl %d %d%s\r\n" % (after, sid, extra)
        st = Stream(port, line, read_first=read_first)
        self.addCleanup(st.close)
        return st

    # ---- a flood of streams -------------------------------------------------

    def flood(self, cap):
        m = self.master(["-repl-max", str(cap)], name="m%d" % cap, conns=200)
        with m.conn() as c:
            c.request(b"set a 0 0 1\r\n1\r\n")
        last = last_ts(m)
        before = threads(m)
        firsts = [self.stream(m.port, 100 + i, last).first for i in range(40)]
        with m.conn() as c:
            st = stats(c)
        return m, firsts, st, before

    def test_flood_past_repl_max(self):
        m, firsts, st, before = self.flood(8)
        taken = [f for f in firsts if f.startswith(b"REPL ")]
        refused = [f for f in firsts if not f.startswith(b"REPL ")]
        self.assertEqual(len(taken), 8)
        self.assertEqual(set(refused), {b"SERVER_ERROR too many replication streams "
                                        b"(-repl-max 8)"})
        self.assertEqual(st["repl_replicas"], "8")
        self.assertEqual(st["repl_streams_refused"], "32")
        self.assertEqual(st["repl_max"], "8")
        self.assertEqual(threads(m), before, "no thread per stream")
        with m.conn() as c:
            self.assertEqual(c.request(b"get a\r\n"), b"VALUE a 0 1\r\n1\r\nEND\r\n")
        # negative check: with the cap lifted, the same flood is taken
        m2, firsts2, st2, before2 = self.flood(100)
        self.assertTrue(all(f.startswith(b"REPL ") for f in firsts2), firsts2[:3])
        self.assertEqual(st2["repl_replicas"], "40")
        self.assertEqual(threads(m2), before2, "no thread per stream")
        # 40 streams that read nothing, each past its output's high-water
        # mark once these rows are in: a stream that reads still gets every
        # row (none holds up another)
        first = last_ts(m2)
        v = b"v" * 65536
        with m2.conn() as c:
            for i in range(64):
                self.assertEqual(c.request(b"set f%d 0 0 %d\r\n%s\r\n" % (i, len(v), v)),
                                 b"STORED\r\n")
        reader = Stream(m2.port, b"repl %d 999\r\n" % first)
        self.addCleanup(reader.close)
        rows = reader.rows_until_heartbeat(timeout=30)
        self.assertEqual([r["key"] for r in rows], [b"f%d" % i for i in range(64)])

    def test_streams_count_against_c(self):
        def curr(m):
            with m.conn() as c:
                return int(stats(c)["curr_connections"])

        def client_gets(m):
            """What a new client is answered to "get a" (until the close)."""
            s = socket.create_connection(("127.0.0.1", m.port), timeout=10 * kuratest.SCALE)
            try:
                # refused, it is told at once (then closed): asking first
                # would turn the close into a reset that loses the line
                ready, _, _ = select.select([s], [], [], 2 * kuratest.SCALE)
                if not ready:
                    s.sendall(b"get a\r\n")
                buf = b""
                while not buf.endswith(b"END\r\n"):
                    d = s.recv(65536)
                    if not d:
                        break
                    buf += d
                return buf
            finally:
                s.close()

        def run(conns):
            m = self.master(["-repl-max", "100"], name="c%d" % conns, conns=conns)
            with m.conn() as c:
                c.request(b"set a 0 0 1\r\n1\r\n")
            last = last_ts(m)
            # the clients above are gone (stats' own connection counts)
            poll_until(lambda: curr(m) == 1, timeout=10, what="the clients counted out")
            streams = [self.stream(m.port, 100 + i, last) for i in range(10)]
            self.assertTrue(all(s.first.startswith(b"REPL ") for s in streams))
            return m, streams, client_gets(m)
        m, streams, got = run(10)
        self.assertEqual(got, b"ERROR Too many open connections\r\n")
        for s in streams:
            s.close()
        # the streams gave their count back: clients are served again
        poll_until(lambda: client_gets(m) == b"VALUE a 0 1\r\n1\r\nEND\r\n", timeout=10,
                   what="a client served again")
        # negative check: room for the same client under a larger -c
        m2, streams2, got2 = run(11)
        self.assertEqual(got2, b"VALUE a 0 1\r\n1\r\nEND\r\n")

    # ---- full copies on a small update-log disk ------------------------------

    def mount_tmpfs(self, size):
        return kuratest.mount_tmpfs(self, self.dir, size)

    def fill(self, m, first, n, size=64 * 1024):
        v = b"v" * size
        with m.conn() as c:
            for i in range(first, first + n):
                self.assertEqual(c.request(b"set big%d 0 0 %d\r\n%s\r\n" % (i, size, v)),
                                 b"STORED\r\n")

    def test_copy_flood_small_disk(self):
        mnt = self.mount_tmpfs(64 * MB)
        # -ulim 4m: the update log needs its next file (4 MB) plus 8 MB free
        m = self.master(["-ulim", "4m", "-repl-max", "50"], ulog=os.path.join(mnt, "ul"))
        self.fill(m, 0, 256)                              # 16 MB in the store and in the log
        copies = [self.stream(m.port, 100 + i, 0, b" copy=1") for i in range(10)]
        boot = [s for s in copies if s.first.startswith(b"BOOT ")]
        refused = [s.first for s in copies if not s.first.startswith(b"BOOT ")]
        self.assertEqual(len(boot), 4, [s.first for s in copies])
        self.assertEqual(set(refused), {b"SERVER_ERROR too many full copies at once (4); "
                                        b"try again later"})
        self.assertEqual(len({s.first.split()[1] for s in boot}), 1, "one start: one spool")
        with m.conn() as c:
            self.assertEqual(stats(c)["repl_copy_spools"], "1")
        self.fill(m, 256, 16)                             # writes go on meanwhile
        for s in copies:
            s.close()
        poll_until(lambda: stats(m.conn())["repl_replicas"] == "0", timeout=20,
                   what="the copy streams to end")
        # now a store too large to be spooled beside the log
        self.fill(m, 272, 176)                            # 28 MB in all, in each
        st = self.stream(m.port, 200, 0, b" copy=1")
        got = re.fullmatch(rb"SERVER_ERROR no room for a full copy in (\S+) \(needs (\d+) "
                           rb"bytes, (\d+) free\)", st.first)
        self.assertTrue(got, st.first)
        self.assertEqual(got.group(1).decode(), os.path.join(mnt, "ul"))
        self.assertGreater(int(got.group(2)), int(got.group(3)))
        self.assertTrue(st.closed(), "closed after the refusal")
        self.fill(m, 448, 16)                             # the master's writes still succeed
        self.assertNotIn("No space left", m.stderr())
        # negative check: the same store, where there is room, is copied
        m2 = self.master(["-ulim", "4m", "-repl-max", "50"], name="m2")
        self.fill(m2, 0, 464)
        st2 = self.stream(m2.port, 200, 0, b" copy=1")
        self.assertTrue(st2.first.startswith(b"BOOT "), st2.first)

    # ---- acks -------------------------------------------------------------------

    def syncrepl_master(self):
        return self.master(["-syncrepl", "1", "-syncrepl-timeout", "1500", "-syncrepl-fail",
                            "close"])

    def set_confirmed(self, m, key):
        """True if the set was answered (-syncrepl satisfied), False if the
        connection closed unanswered (it was not)."""
        with m.conn(timeout=10) as c:
            c.send(b"set %s 0 0 1\r\nx\r\n" % key)
            try:
                got = c.line(timeout=10)
            except kuratest.Closed:
                return False
            self.assertEqual(got, b"STORED\r\n")
            return True

    def test_ack_spoofing(self):
        m = self.syncrepl_master()
        self.assertFalse(self.set_confirmed(m, b"k0"))   # nobody: not confirmed
        # a position past the log is not taken as held: a full copy
        s1 = self.stream(m.port, 9, 18446744073709551615)
        self.assertTrue(s1.first.startswith(b"BOOT "), s1.first)
        self.assertFalse(self.set_confirmed(m, b"k1"))
        self.assertIn("claims position 18446744073709551615", m.stderr())
        # an ACK beyond what was sent ends the stream
        s2 = self.stream(m.port, 10, last_ts(m))
        self.assertTrue(s2.first.startswith(b"REPL "), s2.first)
        s2.s.sendall(b"ACK %d\r\n" % (last_ts(m) + 10 ** 12))
        self.assertTrue(s2.closed(), "the stream ended")
        self.assertRegex(m.stderr(), r"acknowledged \d+, beyond the newest row sent to it")
        self.assertFalse(self.set_confirmed(m, b"k2"))
        # negative check: a fake replica that acks what it is sent satisfies it
        s3 = self.stream(m.port, 11, last_ts(m))
        s3.rows_until_heartbeat()
        stop = []

        def acker():
            while not stop:
                try:
                    got, s3.buf = decode_rows(s3.buf)
                    for r in got:
                        if r["type"] != MARK:
                            s3.s.sendall(b"ACK %d\r\n" % r["ts"])
                    s3.buf += s3.s.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    return
        s3.s.settimeout(0.2)
        t = threading.Thread(target=acker, daemon=True)
        t.start()
        self.addCleanup(stop.append, 1)
        self.assertTrue(self.set_confirmed(m, b"k3"))
        stop.append(1)
        t.join()

    def test_one_sid_counts_once(self):
        m = self.master(["-syncrepl", "2", "-syncrepl-timeout", "1500"])

        def ackers(sids):
            last = last_ts(m)
            return [self.stream(m.port, sid, last) for sid in sids]

        def pump(ss, rounds):
            for _ in range(rounds):
                ready, _, _ = select.select([s.s for s in ss], [], [], 0.05)
                for s in ss:
                    if s.s not in ready:
                        continue
                    try:
                        d = s.s.recv(65536)
                    except OSError:
                        continue
                    s.buf += d
                    got, s.buf = decode_rows(s.buf)
                    for r in got:
                        if r["type"] != MARK:
                            try:
                                s.s.sendall(b"ACK %d\r\n" % r["ts"])
                            except OSError:
                                pass


        def confirmed_with(sids):
            ss = ackers(sids)
            res = []
            t = threading.Thread(target=lambda: res.append(self.set_confirmed(m, b"k")))
            t.start()
            while t.is_alive():
                pump(ss, 1)
            t.join()
            for s in ss:
                s.close()
            return res[0], ss
        ok, ss = confirmed_with([5, 5])
        self.assertFalse(ok, "two streams of one sid count once")
        self.assertIn("replica sid 5 connected again", m.stderr())
        poll_until(lambda: stats(m.conn())["repl_replicas"] == "0", timeout=10,
                   what="the streams to end")
        # negative check: two distinct sids satisfy -syncrepl 2
        ok, ss = confirmed_with([6, 7])
        self.assertTrue(ok)

    # ---- server ids -------------------------------------------------------------

    def test_bad_server_ids(self):
        m = self.master()
        with m.conn() as c:
            for sid in (b"0", b"65536", b"4294967296", b"18446744073709551616"):
                self.assertIn(c.request(b"repl 0 " + sid + b"\r\n"),
                              (b"CLIENT_ERROR bad server id (1-65535)\r\n",
                               b"CLIENT_ERROR bad command line format\r\n"), sid)
            self.assertEqual(c.request(b"repl 0 0\r\n"),
                             b"CLIENT_ERROR bad server id (1-65535)\r\n")
        own = self.stream(m.port, 1, 0)
        self.assertEqual(own.first, b"SERVER_ERROR server id 1 is this master's own (give the "
                                    b"replica a -sid of its own)")
        self.assertTrue(own.closed())
        # negative check: the largest id is taken
        ok = self.stream(m.port, 65535, 0)
        self.assertRegex(ok.first, rb"^(REPL|BOOT) \d+ 1$")
        for bad in ("0", "65536"):
            p = subprocess.run([kuratest.kurad_path(), "-sid", bad, "-port", "0",
                                "-ulog", os.path.join(self.dir, "x.ul")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn(b"-sid", p.stderr)

    # ---- stats ------------------------------------------------------------------

    def test_stats_lines(self):
        m = self.master()
        rd = os.path.join(self.dir, "r")
        r = Server(db=rd + ".kh", kura_args=["-sid", "2", "-ulog", rd + ".ul", "-mhost",
                                             "127.0.0.1", "-mport", str(m.port)])
        self.addCleanup(r.stop, check=False)
        with m.conn() as c:
            c.request(b"set a 0 0 1\r\n1\r\n")
        last = last_ts(m)
        line = poll_until(lambda: (lambda v: v and "lag_rows=0," in v and
                                   "acked=%d," % last in v and v)(
            stats(m.conn(), b"repl").get("repl_replica_2")), timeout=20,
            what="the replica caught up")
        self.assertRegex(line, r"^127\.0\.0\.1:%d,state=streaming,acked=%d,sent=%d,lag_rows=0,"
                         r"lag_us=0$" % (r.port, last, last))
        # a fake replica that never acks: its lag is unknown, not 0
        s = self.stream(m.port, 3, last)
        self.assertTrue(s.first.startswith(b"REPL "))
        st = stats(m.conn(), b"repl")
        self.assertRegex(st["repl_replica_3"], r"^127\.0\.0\.1:0,state=streaming,acked=%d,sent=%d,"
                         r"lag_rows=(0|unknown),lag_us=unknown$" % (last, last))
        self.assertEqual(st["repl_replicas"], "2")
        self.assertEqual(st["repl_max"], "16")
        self.assertEqual(st["repl_streams_refused"], "0")
        self.assertNotIn("repl_replica_2", stats(m.conn()))  # stats repl only


if __name__ == "__main__":
    kuratest.main()
