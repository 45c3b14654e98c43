#!/usr/bin/python3
# kura-test: once
"""test_repl_auth.py - replication and kuractl with authentication on (-Y):
docs/security.md, docs/replication.md's "Authentication".

  Replica     a master with -Y: a replica with -mauth (and one with only
              -Y, whose first line it sends) authenticates and follows;
              its "repl follow" at run time too.
  Refused     a wrong password: repl_state refused, one log line naming
              the user, no data, and few connects (the backoff); no
              credentials at all: refused the same way (negative).
  No -Y       a replica with -mauth whose master has no -Y follows, and
              the master holds no item "auth" (credentials are sent only
              when asked for).
  kuractl     -a FILE against a -Y server: stats, repl status (the tree,
              the same credentials for each server), digest; a wrong
              password: exit 4 with the server's line; no -a: exit 4; a
              bad -a file: exit 2.
  Files       -mauth missing, a directory, malformed, empty: exit 2 and one
              line naming it; -mauth without -mhost starts.
  SASL        a master with -S: a replica with -mauth logs in with SASL
              PLAIN over the binary protocol and follows; kuractl -a too
              (stats, repl status, digest, get); a wrong password: the
              replica refused (its log line and repl_last_error say "Auth
              failure."), kuractl exit 4; the login's first request gets the
              same bytes from memcached -S and kurad -S, and so does a text
              line before authentication (closed); after it kurad serves
              text, which memcached -S does not (the one difference); the
              negative: without a login the text line is closed unanswered.
  Syncrepl    -syncrepl 1 with -Y: a raw "repl" stream without
              authentication is refused and cannot hold a reply up to an
              acknowledgement (the write's connection closes unanswered);
              the negative: the same stream authenticated acknowledges the
              row and the write is answered STORED.
"""
import os, shutil, socket, subprocess, sys, tempfile, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kuratest
from kuratest import Server, stats, free_port, poll_until, kura_only
from test_repl import decode_rows, PUT
from test_kuractl import run as kuractl
import test_sasl
from test_sasl import req, plain, converse, scrub_cas, OP_SET, OP_MECHS

UNAUTH = b"CLIENT_ERROR unauthenticated\r\n"
LOGIN = b"set auth 0 0 12\r\nalice secret\r\n"


@kura_only
class ReplAuth(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kuratest-replauth-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.yfile = self.write("users", b"alice:secret\nbob:pw2\n")
        self.good = self.write("good", b"alice:secret\n")
        self.bad = self.write("bad", b"alice:wrong\n")

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(text)
        os.chmod(path, 0o600)
        return path

    def server(self, name, args, env=None):
        d = os.path.join(self.dir, name)
        s = Server(db=d + ".kh", kura_args=["-ulog", d + ".ul"] + list(args), env=env)
        self.addCleanup(s.stop, check=False)
        return s

    def master(self, args=()):
        return self.server("m", ["-sid", "1", "-Y", self.yfile] + list(args))

    def replica(self, master, name="r", sid=2, args=(), env=None):
        return self.server(name, ["-sid", str(sid), "-mhost", "127.0.0.1", "-mport",
                                  str(master.port)] + list(args), env=env)

    def login(self, server):
        c = server.conn(timeout=10)
        self.assertEqual(c.request(LOGIN), b"STORED\r\n")
        return c

    def test_replica_authenticates(self):
        m = self.master()
        r1 = self.replica(m, "r1", 2, ["-mauth", self.good])
        r2 = self.replica(m, "r2", 3, ["-Y", self.yfile])      # -Y's first line
        with self.login(m) as c:
            self.assertEqual(c.request(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n")
        with r1.conn() as c1, self.login(r2) as c2:
            for c in (c1, c2):
                poll_until(lambda: c.request(b"get k\r\n") == b"VALUE k 0 1\r\nv\r\nEND\r\n",
                           timeout=20, what="the replica has k")
                self.assertEqual(stats(c, b"repl")["repl_state"], "connected")
        # a server made a replica at run time (repl follow) uses -mauth too
        r3 = self.server("r3", ["-sid", "4", "-mauth", self.good])
        with r3.conn() as c:
            self.assertTrue(c.request(b"repl follow 127.0.0.1:%d\r\n" % m.port)
                            .startswith(b"OK"))
            poll_until(lambda: c.request(b"get k\r\n") == b"VALUE k 0 1\r\nv\r\nEND\r\n",
                       timeout=20, what="the followed replica has k")

    def refused(self, r, why):
        with r.conn() as c:
            # "refused" from the first refusal on, through the next attempts
            got = {}
            def seen():
                got.update(stats(c, b"repl"))
                return got["repl_state"] == "refused" and int(got["repl_connects"]) >= 4
            poll_until(seen, timeout=30, what="refused, after four attempts")
            st = dict(got)
            # and it stays "refused" through the next attempt (it showed
            # "connecting" for each, when /health said all was well)
            states = set()
            def next_attempt():
                s2 = stats(c, b"repl")
                states.add(s2["repl_state"])
                return int(s2["repl_connects"]) > int(st["repl_connects"])
            poll_until(next_attempt, timeout=30, interval=0.001, what="another attempt")
            self.assertEqual(states, {"refused"})
            self.assertIn(why, st["repl_last_error"])
            # the backoff: 100, 200, 400 ms, ... between attempts, not a loop
            self.assertLess(int(st["repl_connects"]), 10)
            self.assertEqual(st["repl_rows_applied"], "0")
            self.assertEqual(c.request(b"get k\r\n"), b"END\r\n")

    def test_wrong_password_refused(self):
        m = self.master()
        with self.login(m) as c:
            self.assertEqual(c.request(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n")
        r = self.replica(m, args=["-mauth", self.bad])
        self.refused(r, "authentication as user 'alice': CLIENT_ERROR authentication failure")
        self.assertEqual(r.stderr().count("refused authentication as user 'alice'"), 1)
        with self.login(m) as c:
            self.assertGreaterEqual(int(stats(c)["auth_errors"]), 4)

    def test_no_credentials_refused(self):
        m = self.master()
        with self.login(m) as c:
            self.assertEqual(c.request(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n")
        r = self.replica(m)
        self.refused(r, "CLIENT_ERROR unauthenticated")

    def test_master_without_Y(self):
        m = self.server("m", ["-sid", "1"])
        r = self.replica(m, args=["-mauth", self.good])
        with m.conn() as c:
            self.assertEqual(c.request(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n")
        with r.conn() as c:
            poll_until(lambda: c.request(b"get k\r\n") == b"VALUE k 0 1\r\nv\r\nEND\r\n",
                       timeout=20, what="the replica has k")
        with m.conn() as c:
            self.assertEqual(c.request(b"get auth\r\n"), b"END\r\n")
        rc, out, err = kuractl("-a", self.good, "-s", "127.0.0.1:%d" % m.port, "stats")
        self.assertEqual(rc, 0, err)
        with m.conn() as c:
            self.assertEqual(c.request(b"get auth\r\n"), b"END\r\n")

    def kuractl_walks(self, ma, ra):
        """kuractl -a: stats, repl status (the tree, the same credentials for
        each server) and digest of master ma and replica ra."""
        rc, out, err = kuractl("-a", self.good, "-s", ma, "stats")
        self.assertEqual(rc, 0, err)
        self.assertIn("curr_items", out)
        poll_until(lambda: kuractl("-a", self.good, "-s", ma, "repl", "status")[0] == 0,
                   timeout=20, what="repl status in sync")
        rc, out, err = kuractl("-a", self.good, "-s", ma, "repl", "status")
        self.assertIn(ra, out)          # walked to the replica with the same credentials
        rc, out, err = kuractl("-a", self.good, "digest", ma, ra)
        self.assertEqual(rc, 0, out + err)

    def test_kuractl(self):
        m = self.master()
        r = self.replica(m, args=["-mauth", self.good, "-Y", self.yfile])
        ma, ra = "127.0.0.1:%d" % m.port, "127.0.0.1:%d" % r.port
        with self.login(m) as c:
            self.assertEqual(c.request(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n")
        with self.login(r) as c:
            poll_until(lambda: c.request(b"get k\r\n") == b"VALUE k 0 1\r\nv\r\nEND\r\n",
                       timeout=20, what="the replica has k")
        self.kuractl_walks(ma, ra)
        rc, out, err = kuractl("-a", self.good, "-s", ma, "get", "k")
        self.assertEqual((rc, out), (0, "v"), err)
        # refused: the server's line, exit 4 (the server answered an error)
        rc, out, err = kuractl("-a", self.bad, "-s", ma, "stats")
        self.assertEqual(rc, 4, err)
        self.assertIn("CLIENT_ERROR authentication failure", err)
        rc, out, err = kuractl("-s", ma, "stats")
        self.assertEqual(rc, 4, err)
        self.assertIn("CLIENT_ERROR unauthenticated", err)
        for path in (os.path.join(self.dir, "nope"), self.write("empty", b""),
                     self.write("nocolon", b"alice\n")):
            rc, out, err = kuractl("-a", path, "-s", ma, "stats")
            self.assertEqual(rc, 2, (path, err))
            self.assertIn(path, err)

    def test_mauth_file_errors(self):
        bad = {
            "missing": os.path.join(self.dir, "nope"),
            "a directory": self.dir,
            "no colon": self.write("nocolon", b"alice\n"),
            "empty": self.write("empty", b""),
        }
        for what, path in bad.items():
            s = Server(kind="kurad", kura_args=["-mhost", "127.0.0.1", "-mauth", path],
                       start=False)
            p = subprocess.run(s.argv(free_port()), capture_output=True, timeout=30,
                               cwd=s.tmpdir)
            shutil.rmtree(s.tmpdir, True)
            self.assertEqual(p.returncode, 2, (what, p.stderr))
            lines = p.stderr.decode().strip().splitlines()
            self.assertEqual(len(lines), 1, (what, lines))
            self.assertIn(path, lines[0], what)
        s = self.server("alone", ["-mauth", self.good])     # no -mhost: accepted
        with s.conn() as c:
            self.assertEqual(c.request(b"version\r\n")[:8], b"VERSION ")

    def raw_stream(self, m, auth):
        s = socket.create_connection(("127.0.0.1", m.port), timeout=10 * kuratest.SCALE)
        self.addCleanup(s.close)
        f = s.makefile("rb")
        if auth:
            s.sendall(LOGIN)
            self.assertEqual(f.readline(), b"STORED\r\n")
        s.sendall(b"repl 1 99\r\n")
        return s, f

    def test_syncrepl_needs_authenticated_replica(self):
        m = self.master(["-syncrepl", "1", "-syncrepl-timeout", "1000"])
        # unauthenticated: refused, and so cannot acknowledge
        s, f = self.raw_stream(m, auth=False)
        self.assertEqual(f.readline(), UNAUTH)
        s.sendall(b"ACK 18446744073709551615\r\n")
        with self.login(m) as c:
            c.send(b"set a 0 0 1\r\n1\r\n")
            self.assertTrue(c.is_closed(timeout=10), "closed without a reply")
        with self.login(m) as c:
            self.assertEqual(int(stats(c)["repl_syncrepl_timeouts"]), 1)
        # the negative: the same stream authenticated holds the reply until
        # its ACK of the row, then the write is answered
        s, f = self.raw_stream(m, auth=True)
        self.assertTrue(f.readline().startswith(b"REPL "))
        with self.login(m) as c:
            poll_until(lambda: stats(c, b"repl").get("repl_replicas") == "1", timeout=10,
                       what="the stream counted")
            c.send(b"set b 0 0 1\r\n2\r\n")
            buf, ts = b"", None
            while ts is None:
                data = s.recv(65536)
                self.assertTrue(data, "stream closed")
                buf += data
                rows, buf = decode_rows(buf)
                ts = next((r["ts"] for r in rows if r["type"] == PUT and r["key"] == b"b"),
                          None)
            s.sendall(b"ACK %d\r\n" % ts)
            self.assertEqual(c.reply(), b"STORED\r\n")
        with self.login(m) as c:
            self.assertEqual(int(stats(c)["repl_syncrepl_timeouts"]), 1)


# the login's first request (src/proto/login.c): SASL list mechanisms with
# a newline as the cas field's last byte
PROBE = bytes([0x80, 0x20]) + bytes(21) + b"\n"


@kura_only
class ReplSasl(ReplAuth):
    """The same servers started with -S (and no -Y)."""

    def setUp(self):
        ReplAuth.setUp(self)
        keep = self.dir
        test_sasl.sasl_setup(self)      # its own dir, with the sasldb and memcached.conf
        self.files = keep

    def master(self, args=()):
        return self.server("m", ["-sid", "1", "-S"] + list(args), env=self.env)

    def put(self, m, key, val):
        got = converse(m, [test_sasl.LOGIN, req(OP_SET, key, val, ext=bytes(8))])
        self.assertTrue(got.startswith(b"\x81\x21\x00\x00"), got)     # Authenticated
        self.assertEqual(got[24 + 13 + 6:24 + 13 + 8], b"\x00\x00", got)  # stored

    # the ReplAuth tests that need -Y are not run again here
    test_replica_authenticates = test_no_credentials_refused = None
    test_master_without_Y = test_mauth_file_errors = None
    test_syncrepl_needs_authenticated_replica = test_kuractl = test_wrong_password_refused = None

    def test_sasl_replica_follows(self):
        m = self.master()
        self.put(m, b"k", b"v")
        r = self.replica(m, "r", 2, ["-mauth", self.good])
        with r.conn() as c:
            poll_until(lambda: c.request(b"get k\r\n") == b"VALUE k 0 1\r\nv\r\nEND\r\n",
                       timeout=20, what="the replica has k")
            self.assertEqual(stats(c, b"repl")["repl_state"], "connected")
        self.put(m, b"k2", b"w")
        with r.conn() as c:
            poll_until(lambda: c.request(b"get k2\r\n") == b"VALUE k2 0 1\r\nw\r\nEND\r\n",
                       timeout=20, what="the replica follows")

    def test_sasl_wrong_password(self):
        m = self.master()
        self.put(m, b"k", b"v")
        r = self.replica(m, args=["-mauth", self.bad])
        self.refused(r, "authentication as user 'alice': Auth failure.")
        self.assertEqual(r.stderr().count("refused authentication as user 'alice'"), 1)

    def test_sasl_kuractl(self):
        m = self.master()
        r = self.replica(m, args=["-mauth", self.good, "-S"], env=self.env)
        ma, ra = "127.0.0.1:%d" % m.port, "127.0.0.1:%d" % r.port
        self.put(m, b"k", b"v")
        poll_until(lambda: kuractl("-a", self.good, "-s", ra, "get", "k")[1] == "v",
                   timeout=20, what="the replica has k")
        self.kuractl_walks(ma, ra)
        rc, out, err = kuractl("-a", self.bad, "-s", ma, "stats")
        self.assertEqual(rc, 4, err)
        self.assertIn("authentication as user 'alice' refused: Auth failure.", err)
        # no -a: kuractl's text gets what memcached -S gives it (nothing, then -t)
        rc, out, err = kuractl("-t", "1", "-s", ma, "stats")
        self.assertEqual(rc, 3, err)

    def test_sasl_bytes_as_memcached(self):
        ref = Server(kind="memcached", mc_args=["-S"], env=self.env)
        self.addCleanup(ref.stop)
        m = self.master()
        stats_line = b"stats\r\n".ljust(24, b" ")
        for steps in ([PROBE], [PROBE, plain(b"alice", b"wrong")], [PROBE, test_sasl.LOGIN]):
            self.assertEqual(scrub_cas(converse(ref, steps)), scrub_cas(converse(m, steps)))
        got = []                        # text before authentication: closed, unanswered
        for srv in (ref, m):
            with srv.conn(timeout=10) as c:
                c.send(PROBE + stats_line)
                got.append(c.read_to_close())
        self.assertEqual(got[0], got[1])
        self.assertNotIn(b"STAT", got[1])
        with ref.conn(timeout=10) as c:     # memcached -S closes text even after a login
            c.send(test_sasl.LOGIN)
            self.assertTrue(c.recv_exact(24 + 13).endswith(b"Authenticated"))
            c.send(stats_line)
            self.assertEqual(c.read_to_close(), b"")
        with m.conn(timeout=10) as c:       # kurad serves it (kura's own commands)
            c.send(test_sasl.LOGIN + b"stats repl\r\n")
            got = [b""]
            def answered():
                got[0] += c.read_available(0.2)
                return got[0].endswith(b"END\r\n")
            poll_until(answered, timeout=10, what="stats repl answered in text")
            self.assertIn(b"\r\nSTAT repl_", got[0])


if __name__ == "__main__":
    kuratest.main()
