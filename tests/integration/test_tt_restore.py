#!/usr/bin/python3
# Tokyo Tyrant's restore (tcrmgr restore [-ts N] [-rcc] host upath; issue 33,
# item 2), replayed on the snapshot thread (src/server/ttrestore.c), and
# setmst's timestamp.  Before: restore answered 1 whatever it was given.
#
#  * A ttserver update-log directory written here from the format (tculog.c:
#    files NNNNNNNN.ulog of records [0xC9][ts 64][sid 16][mid 16][size 32]
#    [the request][its outcome byte]): every kind of record ttserver logs
#    (put, putkeep, putcat, putshl, out, addint, adddouble, vanish, misc
#    putlist and outlist, records logged as failed), across two files, is
#    replayed with restore(dir, 0, 0): 0 and the records hold what a client
#    sending the same requests would hold.  From a timestamp, only the
#    records at or after it.
#  * -rcc (RDBROCHKCON): a record whose outcome here differs from the
#    logged one ends the replay with 1 (what follows is not applied);
#    without it the same log answers 0 and is replayed whole.
#  * As ttserver's reader: a torn last record and a bad magic byte end the
#    replay with 0; a command ttserver does not log is 1; a missing
#    directory 1; an empty one 0, having replayed nothing.
#  * kura's own update-log directory (-ulog): a server's changes restored
#    into another, and a server restored from its own directory returns
#    (the rows it appends while replaying are not replayed again).
#  * With KURA_TT_BIN holding ttserver and tcrmgr (docs/HACKING.md): a log
#    written by a real ttserver, restored into kurad by `tcrmgr restore`,
#    gives the records ttserver held.
#  * A read-only replica and a fenced master refuse a restore (1), applying
#    nothing (before: kura's rows went in behind the replica switch).
#  * With -syncrepl 1 and no replica, a restore is not acknowledged (its
#    connection closed unanswered, as a set's; before: answered 0).
#  * SIGTERM during a long restore: the replay stops at its next record and
#    kurad exits 0 (before: the stop freed the role under the replay).
#  * setmst with a timestamp writes it as the replica's position (the rts
#    file), as ttserver's setmst does.
import os, shutil, signal, struct, subprocess, sys, tempfile, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kuratest
from kuratest import ServerTestCase, not_applicable
from test_daemon import connects
from test_tt import TT, RNUM, put, putkeep, putcat, putshl, out, get, addint, adddouble, misc

P = struct.pack
BIN = os.environ.get("KURA_TT_BIN", "")


def restore(path, ts=0, opts=0):
    return b"\xc8\x74" + P(">IQI", len(path), ts, opts) + path


def setmst(host, port, ts=0, opts=0):
    return b"\xc8\x78" + P(">IIQI", len(host), port, ts, opts) + host


def ulmisc(name, *args):
    """misc as ttserver logs it: [nsiz][anum], no options field"""
    return (b"\xc8\x90" + P(">II", len(name), len(args)) + name +
            b"".join(P(">I", len(a)) + a for a in args))


def rec(ts, req, ok=True):
    """One ttserver update-log record of request req, logged as ok or not."""
    body = req + (b"\x00" if ok else b"\x01")
    return b"\xc9" + P(">QHHI", ts, 1, 0, len(body)) + body


def write_log(d, files):
    os.makedirs(d, exist_ok=True)
    for i, recs in enumerate(files, 1):
        with open(os.path.join(d, "%08d.ulog" % i), "wb") as f:
            f.write(b"".join(recs))


# ts in microseconds, as ttserver's; the second file starts at 5000
FIRST = [
    rec(1000, put(b"a", b"1")),
    rec(1001, put(b"b", b"2")),
    rec(1002, putcat(b"a", b"x")),
    rec(1003, putkeep(b"b", b"9"), ok=False),       # refused there, and here
    rec(1004, out(b"zz"), ok=False),
    rec(1005, addint(b"n", 5)),
    rec(1006, adddouble(b"d", 1, 500000000000)),
    rec(1007, putshl(b"s", b"abcdef", 4)),
    rec(1008, ulmisc(b"putlist", b"k1", b"v1", b"k2", b"v2")),
    rec(1009, ulmisc(b"outlist", b"k2")),
]
SECOND = [
    rec(5000, put(b"c", b"3")),
    rec(5001, out(b"b")),
]


@unittest.skipIf(kuratest.is_memcached(), not_applicable("Tokyo Tyrant's protocol is kurad's"))
class TTRestore(ServerTestCase):
    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="kuratest-ttrestore-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def tt(self, server=None):
        t = TT(server or self.server)
        self.addCleanup(t.close)
        return t

    def restore(self, t, path, ts=0, opts=0):
        t.send(restore(path.encode() if isinstance(path, str) else path, ts, opts))
        return t.c.recv_exact(1, timeout=120)[0]

    def test_ttserver_log_replayed(self):
        d = os.path.join(self.dir, "ulog")
        write_log(d, [FIRST, SECOND])
        t = self.tt()
        self.assertEqual(self.restore(t, d), 0)
        self.assertEqual(t.value(get(b"a")), b"1x")
        self.assertIsNone(t.value(get(b"b")))
        self.assertEqual(t.value(get(b"c")), b"3")
        self.assertEqual(t.value(get(b"n")), P("<i", 5))
        self.assertEqual(t.value(get(b"s")), b"abcdef")    # a new key: whole, as ttserver
        self.assertEqual(t.value(get(b"k1")), b"v1")
        self.assertIsNone(t.value(get(b"k2")))
        self.assertIsNotNone(t.value(get(b"d")))
        self.assertEqual(t.u64(RNUM), 6)            # a c n d s k1

    def test_from_timestamp(self):
        d = os.path.join(self.dir, "ulog")
        write_log(d, [FIRST, SECOND])
        t = self.tt()
        self.assertEqual(self.restore(t, d, ts=1005), 0)
        self.assertIsNone(t.value(get(b"a")))       # before 1005: skipped
        self.assertEqual(t.value(get(b"n")), P("<i", 5))
        self.assertEqual(t.value(get(b"c")), b"3")
        self.assertEqual(t.u64(RNUM), 5)            # n d s k1 c

    def test_consistency_check(self):
        d = os.path.join(self.dir, "ulog")
        # logged as stored there; here "b" already exists, so putkeep fails
        write_log(d, [[rec(1000, putkeep(b"b", b"new")), rec(1001, put(b"after", b"1"))]])
        t = self.tt()
        self.assertEqual(t.status(put(b"b", b"old")), 0)
        self.assertEqual(self.restore(t, d, opts=1), 1)
        self.assertIsNone(t.value(get(b"after")), "applied past the inconsistency")
        # without -rcc: replayed whole, 0
        self.assertEqual(self.restore(t, d), 0)
        self.assertEqual(t.value(get(b"after")), b"1")
        self.assertEqual(t.value(get(b"b")), b"old")

    def test_where_the_reader_stops(self):
        t = self.tt()
        torn = os.path.join(self.dir, "torn")
        write_log(torn, [[rec(1000, put(b"t1", b"1")), rec(1001, put(b"t2", b"2"))[:-3]]])
        self.assertEqual(self.restore(t, torn), 0)
        self.assertEqual(t.value(get(b"t1")), b"1")
        self.assertIsNone(t.value(get(b"t2")))
        bad = os.path.join(self.dir, "bad")
        write_log(bad, [[rec(1000, put(b"m1", b"1")), b"\x00" + rec(1001, put(b"m2", b"2"))[1:]]])
        self.assertEqual(self.restore(t, bad), 0)
        self.assertEqual(t.value(get(b"m1")), b"1")
        self.assertIsNone(t.value(get(b"m2")))
        unknown = os.path.join(self.dir, "unknown")
        write_log(unknown, [[rec(1000, get(b"x")), rec(1001, put(b"u2", b"2"))]])
        self.assertEqual(self.restore(t, unknown), 1)
        self.assertIsNone(t.value(get(b"u2")))
        self.assertEqual(self.restore(t, os.path.join(self.dir, "missing")), 1)
        empty = os.path.join(self.dir, "empty")
        os.mkdir(empty)
        self.assertEqual(self.restore(t, empty), 0)
        self.assertEqual(self.restore(t, b""), 1)
        self.assertEqual(t.status(put(b"after", b"1")), 0)  # the connection carries on

    def test_kura_ulog(self):
        d = os.path.join(self.dir, "kura-ulog")
        src = self.start_server(kura_args=("-ulog", d))
        s = self.tt(src)
        for i in range(100):
            self.assertEqual(s.status(put(b"k%03d" % i, b"v%d" % i)), 0)
        self.assertEqual(s.status(out(b"k007")), 0)
        t = self.tt()
        self.assertEqual(self.restore(t, d), 0)
        self.assertEqual(t.u64(RNUM), 99)
        self.assertEqual(t.value(get(b"k042")), b"v42")
        self.assertIsNone(t.value(get(b"k007")))
        # the server's own directory: it returns, holding the same
        self.assertEqual(self.restore(s, d), 0)
        self.assertEqual(s.u64(RNUM), 99)

    def test_refused_where_writes_are(self):
        """A read-only replica and a fenced master refuse a restore (1) and
        hold none of its rows, from kura's directory as from ttserver's
        (before the fix: kura's rows were applied and answered 0 on both, a
        fenced master taking writes; ttserver's answered 0, nothing applied)."""
        d = os.path.join(self.dir, "kura-ulog")
        src = self.start_server(kura_args=("-ulog", d))
        s = self.tt(src)
        self.assertEqual(s.status(put(b"k", b"v")), 0)
        tt_dir = os.path.join(self.dir, "tt-ulog")
        write_log(tt_dir, [[rec(1000, put(b"t", b"1"))]])
        replica = self.start_server(kura_args=(
            "-ulog", os.path.join(self.dir, "r-ulog"), "-mhost", "127.0.0.1",
            "-mport", str(kuratest.free_port())))       # a master that never answers
        fenced = self.start_server(kura_args=("-ulog", os.path.join(self.dir, "f-ulog")))
        with fenced.conn() as c:
            r = c.request(b"repl term 5 127.0.0.1 %d\r\n" % fenced.port)
        self.assertTrue(r.startswith(b"FENCED 5"), r)
        for srv in (replica, fenced):
            t = self.tt(srv)
            for path, key in ((d, b"k"), (tt_dir, b"t")):
                with self.subTest(port=srv.port, path=path):
                    self.assertEqual(self.restore(t, path), 1)
                    self.assertIsNone(t.value(get(key)))
        self.assertEqual(self.restore(s, tt_dir), 0)        # a master takes it
        self.assertEqual(s.value(get(b"t")), b"1")

    def test_stop_during_restore(self):
        """SIGTERM while a long restore runs: the replay stops at its next
        record, before replication's role and the committer are freed under
        it, and kurad exits cleanly and soon (before the fix: the stop freed
        them while the replay went on writing, and waited for its end)."""
        n = 1000000
        d = os.path.join(self.dir, "big")
        write_log(d, [[rec(1000 + i, put(b"r%07d" % i, b"x" * 20)) for i in range(n)]])
        srv = self.start_server()
        t = self.tt(srv)
        t.send(restore(d.encode()))
        probe = self.tt(srv)
        kuratest.poll_until(lambda: probe.u64(RNUM) > 0, timeout=60 * kuratest.SCALE,
                            what="the restore to begin")
        self.assertLess(probe.u64(RNUM), n, "the restore ended before the stop (a longer log)")
        srv.proc.send_signal(signal.SIGTERM)
        self.assertEqual(srv.proc.wait(60 * kuratest.SCALE), 0)
        log = srv.stderr() + open(srv.stdout_path, errors="replace").read()
        self.assertIn("restore from %s: stopped: kurad is stopping" % d, log)
        self.assertNotIn("%d records replayed" % n, log)
        srv.stop()                      # its exit and stderr checked (a sanitizer's report)

    def test_isolated_syncrepl_master_does_not_acknowledge(self):
        """With -syncrepl 1 and no replica, a restore's rows are confirmed by
        none: its connection is closed unanswered, as a set's is (before
        the fix: answered 0 once replayed, the rows neither confirmed nor
        waited for)."""
        ms = int(min(1000 * kuratest.SCALE, 8000))
        srv = self.start_server(kura_args=(
            "-ulog", os.path.join(self.dir, "m-ulog"), "-syncrepl", "1",
            "-syncrepl-timeout", str(ms)))
        with srv.conn(timeout=60) as c:                 # the negative: a set is not answered
            c.send(b"set k 0 0 1\r\nv\r\n")
            self.assertEqual(c.read_to_close(timeout=30), b"")
        d = os.path.join(self.dir, "tt")
        write_log(d, [[rec(1000, put(b"t", b"1"))]])
        t = self.tt(srv)
        t.send(restore(d.encode()))
        self.assertEqual(t.c.read_to_close(timeout=30), b"", "a restore acknowledged unconfirmed")

    def test_setmst_timestamp(self):
        """setmst -ts N: N is the position the replica follows from, in its
        rts file, as ttserver writes its own (the master here answers
        nothing: the position is what is checked)."""
        d = os.path.join(self.dir, "ulog")
        srv = self.start_server(kura_args=("-ulog", d))
        t = self.tt(srv)
        port = kuratest.free_port()
        self.assertEqual(t.status(setmst(b"127.0.0.1", port, ts=123456789, opts=1)), 0)
        with open(os.path.join(d, "rts")) as f:
            self.assertEqual(f.read().split()[0], "123456789")
        self.assertEqual(t.status(setmst(b"", 0)), 0)        # a master again

    @unittest.skipUnless(BIN and os.access(os.path.join(BIN, "ttserver"), os.X_OK) and
                         os.access(os.path.join(BIN, "tcrmgr"), os.X_OK),
                         not_applicable("KURA_TT_BIN does not hold ttserver and tcrmgr "
                                        "(docs/HACKING.md, \"Tokyo Tyrant's clients\")"))
    def test_real_ttserver_log(self):
        d = os.path.join(self.dir, "ttulog")
        os.mkdir(d)
        port = kuratest.free_port()
        env = dict(os.environ, LD_LIBRARY_PATH=BIN)
        tts = subprocess.Popen([os.path.join(BIN, "ttserver"), "-host", "127.0.0.1", "-port",
                                str(port), "-ulog", d, "-sid", "1", "*"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        self.addCleanup(lambda: tts.poll() is None and (tts.kill(), tts.wait()))
        kuratest.poll_until(lambda: connects(port), timeout=30, what="ttserver to listen")

        class Peer:
            pass
        peer = Peer()
        peer.port = port
        m = self.tt(peer)
        for i in range(200):
            self.assertEqual(m.status(put(b"r%03d" % i, b"v%d" % i)), 0)
        self.assertEqual(m.status(putcat(b"r001", b"+")), 0)
        self.assertEqual(m.status(out(b"r002")), 0)
        self.assertEqual(m.status(putkeep(b"r003", b"no")), 1)
        m.send(addint(b"n", 7))
        self.assertEqual(m.code(), 0)
        m.u32()
        want = {b"r%03d" % i: m.value(get(b"r%03d" % i)) for i in range(200)}
        m.close()
        tts.send_signal(signal.SIGTERM)
        tts.wait(timeout=30)
        p = subprocess.run([os.path.join(BIN, "tcrmgr"), "restore", "-port",
                            str(self.server.port), "-rcc", "127.0.0.1", d], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)
        t = self.tt()
        got = {k: t.value(get(k)) for k in want}
        self.assertEqual(got, want)
        self.assertEqual(t.value(get(b"n")), P("<i", 7))


if __name__ == "__main__":
    kuratest.main()
