#!/usr/bin/env python3
"""Roles and terms that persist, and an old master fenced (issue 32 items 1-2;
docs/replication.md, "Roles and terms" and "Fencing").

  Restart      the issue's scenario: A master, B and C its replicas, all with
               -ulog and -syncrepl 1; kill -9 A, kuractl repl promote B,
               repl follow C to B, 100 acknowledged writes on B; then every
               server restarted with its original command line (A first, the
               worst order): exactly one writable master (B), A fenced by B's
               probe and following it, every acknowledged write on all three
               and in no divergence file, kuractl repl status truthful on
               each (term, the role's source) and exit 0 once in sync.  The
               restart logs once that the persisted role overrides -mhost.
               Negative (before the fix): A came back a master, B a replica.
  Alone        the old master restarted alone, with -syncrepl 1: a write sent
               before it is fenced is not acknowledged (an isolated master);
               B's probe fences it within the deadline with no operator; the
               unacknowledged write it took is saved aside in a divergence
               file, not lost and not on B
  Handshake    a replica at a higher term asking a master: the master is
               fenced (writes refused, kept across a restart, repl status
               non-zero), the stream refused; a promote takes writes again
  Reset        kuractl repl reset on the promoted server: the next start with
               -mhost follows again (the command line rules)
  Loops        a follow that would form a loop (directly, or up a chain) is
               refused with a message and changes nothing; two servers whose
               command lines follow each other, and a replica of them, are
               "not in sync" in kuractl repl status, which exits non-zero on
               each (before the fix one of them said "in sync", exit 0)
  Login        with -Y on both, the probe logs in (the replica's credentials)
               and fences the old master all the same
  Rw fenced    a -rw server promoted, fenced, promoted again takes writes
               (before the fix: shown as master, refusing every write)
  Fenced hears a fenced server takes a newer term from a replica's handshake,
               so its promote goes past it (before the fix: it kept its term)
  No wrap      a term at 2^64-1 cannot rise: a promote is refused, the kept term
               stays (before the fix: wrapped to 0 in DIR/role)
  No one      a follow failing after the role changed: a replica of no one,
               shown so (before the fix: "master", repl status exit 0)
  Reset fence  repl reset on a fenced server is refused (before the fix: the
               restart made it a master at the current master's term)
  TT setmst    setmst with no host on a fenced server makes it a master (before
               the fix: answered 0 and stayed fenced)
  Corrupt      a role file flipped, cut short or of another version: kurad
               does not start and says why (never a role guessed)
"""
import glob, os, subprocess, sys, time, unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, poll_until, stats

TIMEOUT = 60 * kuratest.SCALE
SYNCREPL_TIMEOUT_MS = int(min(2000 * kuratest.SCALE, 8000))
SYNC = ["-syncrepl", "1", "-syncrepl-timeout", str(SYNCREPL_TIMEOUT_MS)]


def kuractl(*args):
    """(exit code, stdout, stderr) of kuractl."""
    path = os.path.join(os.path.dirname(kuratest.kurad_path()), "kuractl")
    p = subprocess.run([path] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=TIMEOUT)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def addr(s):
    return "127.0.0.1:%d" % s.port


def make(sid, master_port=None, args=(), port=None):
    """A kurad with -sid and -ulog in its temp dir, on port (fixed: a
    restart comes back on it, as a real one does), following master_port."""
    s = Server(start=False, port=port or kuratest.free_port())
    a = ["-sid", str(sid), "-ulog", os.path.join(s.tmpdir, "ulog")] + list(args)
    if master_port:
        a += ["-mhost", "127.0.0.1", "-mport", str(master_port)]
    s.kura_args = a
    return s


def stop(s):
    """SIGTERM and a clean exit, its files kept for the restart (kuratest's
    stop removes them)."""
    s.proc.terminate()
    assert s.proc.wait(TIMEOUT) == 0, s.stderr()
    s._stopped = True


def restart(s):
    s._stopped = False
    return s.start()


def rstats(s):
    with s.conn() as c:
        return stats(c, b"repl")


def get(s, key):
    with s.conn() as c:
        r = c.request(b"get " + key + b"\r\n")
    return None if r == b"END\r\n" else r.split(b"\r\n")[1]


def try_set(s, key, val):
    """STORED, another reply, or None (closed unanswered)."""
    try:
        with s.conn(timeout=TIMEOUT) as c:
            return c.request(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(val), val))
    except (OSError, kuratest.Closed):
        return None


def caught_up(replica, master):
    m, r = rstats(master), rstats(replica)
    return r.get("repl_state") == "connected" and \
        int(r["repl_position"]) >= int(m["ulog_last_ts"])


def diverged_text(s):
    out = b""
    for f in glob.glob(os.path.join(s.tmpdir, "ulog", "diverged-*")):
        with open(f, "rb") as fh:
            out += fh.read()
    return out


def log_text(s):
    return s.stderr() + open(s.stdout_path, errors="replace").read()


class TermsTest(unittest.TestCase):

    def keep(self, *servers):
        for s in servers:
            self.addCleanup(s.stop, check=False)

    def failover(self):
        """A, B, C as the issue has them; A killed, B promoted, C following
        B, 10 writes acknowledged on A before and 100 on B after.  Returns
        (a, b, c, acked)."""
        a = make(1, args=SYNC).start()
        b = make(2, a.port, SYNC).start()
        c = make(3, a.port, SYNC).start()
        self.keep(a, b, c)
        acked = {}
        for i in range(10):
            k, v = b"old%d" % i, b"o%d" % i
            self.assertEqual(try_set(a, k, v), b"STORED\r\n")
            acked[k] = v
        poll_until(lambda: caught_up(b, a) and caught_up(c, a), timeout=TIMEOUT,
                   what="B and C to have A's writes")
        a.kill9()
        poll_until(lambda: all(rstats(s)["repl_connected"] == "0" for s in (b, c)),
                   timeout=TIMEOUT, what="B and C to see A gone")
        rc, out, err = kuractl("repl", "promote", addr(b))
        self.assertEqual(rc, 0, err)
        rc, out, err = kuractl("repl", "follow", addr(c), addr(b))
        self.assertEqual(rc, 0, err)
        poll_until(lambda: caught_up(c, b), timeout=TIMEOUT, what="C to follow B")
        for i in range(100):
            k, v = b"new%d" % i, b"n%d" % i
            self.assertEqual(try_set(b, k, v), b"STORED\r\n", k)
            acked[k] = v
        return a, b, c, acked

    def test_restart_keeps_the_failover(self):
        a, b, c, acked = self.failover()
        st = rstats(b)
        self.assertEqual((st["repl_role"], st["repl_term"], st["repl_role_source"]),
                         ("master", "1", "promote"))
        stop(b)
        stop(c)
        for s in (a, b, c):                     # the original command lines, A first
            restart(s)
        # B's probe tells A of term 1: A fences itself and follows B
        poll_until(lambda: rstats(a).get("repl_master") == addr(b), timeout=TIMEOUT,
                   what="A to be fenced and follow B")
        roles = {s: rstats(s) for s in (a, b, c)}
        self.assertEqual([roles[s]["repl_role"] for s in (a, b, c)],
                         ["replica", "master", "replica"])
        self.assertEqual(roles[c]["repl_master"], addr(b))
        self.assertEqual([roles[s]["repl_term"] for s in (a, b, c)], ["1", "1", "1"])
        self.assertEqual([roles[s]["repl_role_source"] for s in (a, b, c)],
                         ["fence", "promote", "follow"])
        # exactly one writable master
        poll_until(lambda: caught_up(a, b) and caught_up(c, b), timeout=TIMEOUT,
                   what="A and C in sync with B")
        replies = [try_set(s, b"probe", b"x") for s in (a, b, c)]
        self.assertEqual([r == b"STORED\r\n" for r in replies], [False, True, False], replies)
        acked[b"probe"] = b"x"
        poll_until(lambda: caught_up(a, b) and caught_up(c, b), timeout=TIMEOUT,
                   what="A and C to have the probe write")
        for s in (a, b, c):                     # 0 acknowledged writes lost
            missing = [k for k, v in acked.items() if get(s, k) != v]
            self.assertEqual(missing, [], "%r lacks acknowledged writes" % s)
        for s in (a, b, c):                     # ... or moved aside
            text = diverged_text(s)
            self.assertEqual([k for k in acked if k in text], [], "moved aside on %r" % s)
        # the override said once, with how to clear it
        self.assertEqual(log_text(b).count("overrides the command line"), 1)
        self.assertIn("kuractl repl reset", log_text(b))
        # kuractl repl status: the truth, exit 0 once all in sync
        for s, role, source in ((b, "master", "promote"),
                                (c, "replica of %s" % addr(b), "follow"),
                                (a, "replica of %s" % addr(b), "fence")):
            ran = []
            poll_until(lambda: ran.append(kuractl("repl", "status", addr(s))) or
                       ran[-1][0] == 0, timeout=TIMEOUT, what="repl status exit 0 on %r" % s)
            first = ran[-1][1].splitlines()[0]
            self.assertTrue(first.startswith("%s: %s" % (addr(s), role)), first)
            self.assertTrue(first.endswith("; term 1, role from %s" % source), first)

    def test_old_master_alone_is_fenced(self):
        a = make(1, args=SYNC).start()
        b = make(2, a.port).start()             # no replica of its own: no -syncrepl
        self.keep(a, b)
        self.assertEqual(try_set(a, b"k0", b"v0"), b"STORED\r\n")      # B acked it
        poll_until(lambda: caught_up(b, a), timeout=TIMEOUT, what="B to have k0")
        a.kill9()
        self.assertEqual(kuractl("repl", "promote", addr(b))[0], 0)
        self.assertEqual(try_set(b, b"k1", b"v1"), b"STORED\r\n")
        restart(a)                              # alone: no replica follows it
        started = time.monotonic()
        # isolated, not yet told: -syncrepl 1 acknowledges nothing
        reply = try_set(a, b"lost", b"x")
        self.assertNotEqual(reply, b"STORED\r\n")
        poll_until(lambda: rstats(a).get("repl_master") == addr(b), timeout=TIMEOUT,
                   what="B's probe to fence A")
        fenced_in = time.monotonic() - started
        print("# old master fenced %.1f s after its restart" % fenced_in)
        poll_until(lambda: caught_up(a, b), timeout=TIMEOUT, what="A to follow B")
        self.assertEqual(get(a, b"k1"), b"v1")
        self.assertIsNone(get(b, b"lost"))
        self.assertIsNone(get(a, b"lost"))      # A's data is B's now
        if reply is None:
            # A took it before it was fenced (unacknowledged): saved aside
            poll_until(lambda: b"lost" in diverged_text(a), timeout=TIMEOUT,
                       what="the write A took alone to be saved aside")
        self.assertEqual(rstats(a)["repl_role_source"], "fence")
        self.assertEqual(try_set(a, b"k2", b"v"), b"SERVER_ERROR this server is a read-only "
                         b"replica (write to its master)\r\n")

    def test_handshake_fences(self):
        """A master that hears a higher term in a replica's request is
        fenced: writes refused, role fenced (kept across a restart), the
        stream refused, repl status non-zero; a promote takes it back."""
        z = make(1).start()
        y = make(2, z.port).start()
        x = make(3).start()
        self.keep(z, y, x)
        poll_until(lambda: caught_up(y, z), timeout=TIMEOUT, what="Y to follow Z")
        self.assertEqual(kuractl("repl", "promote", addr(y))[0], 0)      # Y: term 1
        self.assertEqual(try_set(x, b"a", b"1"), b"STORED\r\n")
        self.assertEqual(kuractl("repl", "follow", addr(y), addr(x))[0], 0)
        poll_until(lambda: rstats(x)["repl_role"] == "fenced", timeout=TIMEOUT,
                   what="X to hear Y's term")
        self.assertEqual((rstats(x)["repl_term"], rstats(x)["repl_fenced"]), ("1", "1"))
        self.assertEqual(try_set(x, b"b", b"2"), b"SERVER_ERROR this server is a read-only "
                         b"replica (write to its master)\r\n")
        poll_until(lambda: rstats(y)["repl_state"] == "refused", timeout=TIMEOUT,
                   what="Y's stream refused")
        rc, out, err = kuractl("repl", "status", addr(x))
        self.assertNotEqual(rc, 0)
        self.assertIn("not in sync", out)
        stop(x)
        restart(x)
        self.assertEqual(rstats(x)["repl_role"], "fenced")          # kept
        self.assertIn("fenced", log_text(x))
        self.assertEqual(kuractl("repl", "promote", addr(x))[0], 0)
        self.assertEqual((rstats(x)["repl_role"], rstats(x)["repl_term"]), ("master", "2"))
        self.assertEqual(try_set(x, b"b", b"2"), b"STORED\r\n")

    def test_probe_logs_in(self):
        """Servers with -Y: the probe logs in as a replica does (-mauth's
        first entry, else -Y's) and still fences the old master."""
        users = os.path.join(self.tmp(), "users")
        with open(users, "w") as f:
            f.write("alice:secret\n")
        os.chmod(users, 0o600)
        a = make(1, args=["-Y", users]).start()
        b = make(2, a.port, ["-Y", users]).start()
        self.keep(a, b)
        login = b"set auth 0 0 12\r\nalice secret\r\n"

        def ask(s, req):
            with s.conn() as c:
                self.assertEqual(c.request(login), b"STORED\r\n")
                return c.request(req)
        poll_until(lambda: b"repl_state connected" in ask(b, b"stats repl\r\n"),
                   timeout=TIMEOUT, what="B to follow A")
        self.assertTrue(ask(b, b"repl promote\r\n").startswith(b"PROMOTED "))
        poll_until(lambda: ("repl_master %s" % addr(b)).encode() in ask(a, b"stats repl\r\n"),
                   timeout=TIMEOUT, what="B's probe, logged in, to fence A")

    def tmp(self):
        import tempfile, shutil
        d = tempfile.mkdtemp(prefix="kuratest-terms-")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def test_reset_gives_the_command_line_back(self):
        a = make(1).start()
        b = make(2).start()                     # a master by its command line
        self.keep(a, b)
        self.assertEqual(kuractl("repl", "follow", addr(b), addr(a))[0], 0)
        stop(b)
        restart(b)
        st = rstats(b)                          # the follow is kept
        self.assertEqual((st["repl_role"], st["repl_role_source"], st["repl_master"]),
                         ("replica", "follow", addr(a)))
        rc, out, err = kuractl("repl", "reset", addr(b))
        self.assertEqual(rc, 0, err)
        self.assertIn("next start", out)
        self.assertEqual(rstats(b)["repl_role"], "replica")    # running as it was
        stop(b)
        restart(b)
        st = rstats(b)
        self.assertEqual((st["repl_role"], st["repl_role_source"]), ("master", "command line"))

    def test_loops_refused_and_shown(self):
        a = make(1).start()
        b = make(2).start()
        self.keep(a, b)
        rc, out, err = kuractl("repl", "follow", addr(a), addr(b))
        self.assertEqual(rc, 0, err)
        rc, out, err = kuractl("repl", "follow", addr(b), addr(a))     # directly
        self.assertNotEqual(rc, 0)
        self.assertIn("loop", err)
        self.assertEqual(rstats(b)["repl_role"], "master")             # nothing changed
        c = make(3, b.port).start()
        self.keep(c)
        rc, out, err = kuractl("repl", "follow", addr(b), addr(c))     # up the chain
        self.assertNotEqual(rc, 0)
        self.assertIn("loop", err)
        self.assertEqual(rstats(b)["repl_role"], "master")
        # two servers whose command lines follow each other, and a replica
        px, py = kuratest.free_port(), kuratest.free_port()
        x, y = make(4, py, port=px), make(5, px, port=py)
        self.keep(x, y)
        x.start()
        y.start()
        z = make(6, px).start()
        self.keep(z)
        poll_until(lambda: all(rstats(s).get("repl_state") == "connected" for s in (x, y, z)),
                   timeout=TIMEOUT, what="the ring's streams")
        for s in (x, y, z):
            rc, out, err = kuractl("repl", "status", addr(s))
            self.assertNotEqual(rc, 0, out)
            self.assertIn("not in sync", out.splitlines()[0])
            self.assertIn("no master up its chain", out)
        # and a follow into the ring is refused
        rc, out, err = kuractl("repl", "follow", addr(a), addr(x))
        self.assertNotEqual(rc, 0)
        self.assertIn("no master", err)

    def fence_alone(self, s, term):
        """s fenced at term, following no one: told by a "replaced" master
        at its own address, which a follow refuses."""
        with s.conn() as c:
            r = c.request(b"repl term %d 127.0.0.1 %d\r\n" % (term, s.port))
        self.assertTrue(r.startswith(b"FENCED %d not following" % term), r)
        self.assertEqual(rstats(s)["repl_role"], "fenced")
        self.assertTrue(try_set(s, b"f", b"1").startswith(b"SERVER_ERROR"))

    def test_rw_fenced_then_promoted_takes_writes(self):
        """A -rw server promoted, fenced, promoted again takes writes, as its
        role says (before the fix: "master" in repl status, every write
        refused: the fence's read-only switch was left on under -rw)."""
        x = make(1, kuratest.free_port(), ["-rw"]).start()      # its master never answers
        self.keep(x)
        self.assertEqual(kuractl("repl", "promote", addr(x))[0], 0)
        self.assertEqual(try_set(x, b"a", b"1"), b"STORED\r\n")
        self.fence_alone(x, 9)
        rc, out, err = kuractl("repl", "promote", addr(x))
        self.assertEqual(rc, 0, err)
        self.assertEqual((rstats(x)["repl_role"], rstats(x)["repl_term"]), ("master", "10"))
        self.assertEqual(try_set(x, b"b", b"2"), b"STORED\r\n")

    def test_fenced_server_keeps_hearing_terms(self):
        """A fenced server that hears a still newer term (a replica's
        handshake) takes it, so that a promote of it later goes past every
        term it heard (before the fix: its term stayed, and a promote gave
        it a term another master already had: two masters, one term)."""
        a = make(1).start()
        d = make(2).start()
        self.keep(a, d)
        self.fence_alone(a, 1)
        self.fence_alone(d, 5)
        self.assertEqual(kuractl("repl", "promote", addr(d))[0], 0)     # term 6
        self.assertEqual(kuractl("repl", "reset", addr(d))[0], 0)   # the command line rules
        stop(d)
        d.kura_args += ["-mhost", "127.0.0.1", "-mport", str(a.port)]
        restart(d)                              # a replica of A at term 6
        poll_until(lambda: rstats(a)["repl_term"] == "6", timeout=TIMEOUT,
                   what="A to hear D's term")
        self.assertEqual(rstats(a)["repl_role"], "fenced")
        self.assertEqual(kuractl("repl", "promote", addr(a))[0], 0)
        self.assertEqual((rstats(a)["repl_role"], rstats(a)["repl_term"]), ("master", "7"))

    def test_term_does_not_wrap(self):
        """A term at its largest (2^64-1, sent by anyone who may send "repl
        term") cannot rise: a promote is refused and the kept term stays
        (before the fix: the promote wrapped it to 0 in DIR/role, so a
        restart came back a master at term 0)."""
        top = 2 ** 64 - 1
        x = make(1).start()
        self.keep(x)
        self.fence_alone(x, top)
        rc, out, err = kuractl("repl", "promote", addr(x))
        self.assertNotEqual(rc, 0, out)
        self.assertEqual((rstats(x)["repl_role"], rstats(x)["repl_term"]), ("fenced", str(top)))
        stop(x)
        restart(x)
        self.assertEqual((rstats(x)["repl_role"], rstats(x)["repl_term"]), ("fenced", str(top)))

    def test_replica_of_no_one_shown(self):
        """A follow that fails after the role changed (here setmst -ts, whose
        position cannot be written) leaves a replica following no one,
        refusing writes: stats and repl status say so (before the fix:
        repl_role master, repl status exit 0, every write refused)."""
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from test_tt import TT
        from test_tt_restore import setmst
        a, x = make(1).start(), make(2).start()
        self.keep(a, x)
        os.mkdir(os.path.join(x.tmpdir, "ulog", "rts"))     # the position cannot be written
        t = TT(x)
        self.addCleanup(t.close)
        self.assertEqual(t.status(setmst(b"127.0.0.1", a.port, ts=5)), 1)
        self.assertTrue(try_set(x, b"k", b"v").startswith(b"SERVER_ERROR"))
        st = rstats(x)
        self.assertEqual((st["repl_role"], st["repl_state"], st["repl_master"]),
                         ("replica", "stopped", addr(a)))
        rc, out, err = kuractl("repl", "status", addr(x))
        self.assertNotEqual(rc, 0, out)
        self.assertIn("not in sync", out)
        # and a promote takes it back (before: "not a replica: nothing to promote")
        rc, out, err = kuractl("repl", "promote", addr(x))
        self.assertEqual(rc, 0, err)
        self.assertEqual(rstats(x)["repl_role"], "master")
        self.assertEqual(try_set(x, b"k", b"v"), b"STORED\r\n")

    def test_reset_keeps_a_fence(self):
        """repl reset on a fenced server is refused: the next start would
        make it a master at the term of the master that replaced it, which
        no probe or handshake can fence (before the fix: reset answered OK
        and the restart took writes beside the real master)."""
        x = make(1).start()
        self.keep(x)
        self.fence_alone(x, 3)
        rc, out, err = kuractl("repl", "reset", addr(x))
        self.assertNotEqual(rc, 0, out)
        self.assertIn("fenced", err + out)
        stop(x)
        restart(x)
        self.assertEqual((rstats(x)["repl_role"], rstats(x)["repl_term"]), ("fenced", "3"))
        self.assertTrue(try_set(x, b"k", b"v").startswith(b"SERVER_ERROR"))

    def test_tt_setmst_master_unfences(self):
        """Tokyo Tyrant's setmst with no host makes a fenced server a master
        again, as on ttserver (before the fix: it answered 0, "nothing to
        stop", and went on refusing every write)."""
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from test_tt import TT
        from test_tt_restore import setmst
        x = make(1).start()
        self.keep(x)
        self.fence_alone(x, 4)
        t = TT(x)
        self.addCleanup(t.close)
        self.assertEqual(t.status(setmst(b"", 0)), 0)
        st = rstats(x)
        self.assertEqual((st["repl_role"], st["repl_term"], st["repl_role_source"]),
                         ("master", "5", "setmst"))
        self.assertEqual(try_set(x, b"b", b"2"), b"STORED\r\n")

    def test_corrupt_role_file(self):
        s = make(1).start()
        self.keep(s)
        stop(s)
        path = os.path.join(s.tmpdir, "ulog", "role")
        with open(path, "rb") as f:
            good = f.read()
        for bad, why in ((good[:20], "torn"), (good[:30] + bytes([good[30] ^ 1]) + good[31:],
                                                "checksum"),
                         (good[:8] + b"\x09" + good[9:], "version")):
            with open(path, "wb") as f:
                f.write(bad)
            s._stopped = False
            with self.assertRaises(kuratest.ServerError) as e:
                s.start()
            self.assertIn("%s/role" % os.path.join(s.tmpdir, "ulog"), str(e.exception))
            self.assertIn(why, str(e.exception))
        with open(path, "wb") as f:             # the good one starts again
            f.write(good)
        restart(s)
        self.assertEqual(rstats(s)["repl_role"], "master")


if __name__ == "__main__":
    kuratest.main()
