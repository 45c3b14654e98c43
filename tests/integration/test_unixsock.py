#!/usr/bin/python3
# kura-test: once
"""test_unixsock.py - the unix socket (-s PATH) as memcached has it.

  Mode       0700 by default (memcached's), -a MASK otherwise (0666, 0640),
             from the moment it exists; stats settings' umask says it; the
             same as memcached's socket for the same -a (memcached's mode
             compared, file type and permission bits).
  Owner      started as root with -u nobody, the socket is nobody's (skipped
             when not root or without a user nobody).
  Removed    at a clean stop (SIGTERM), and when start-up fails after it was
             made (a taken TCP port); a stale socket file left by a kill -9
             is replaced at the next start.
  Not taken  a socket a live server answers on is refused, not unlinked:
             the first kurad keeps serving on it (the negative: the stale
             one of a killed server is replaced, above).
  Options    -a that is not octal or is over 0777, and -a without -s, stop
             kurad with exit status 2.
"""
import os, pwd, shutil, signal, socket, stat, subprocess, sys, tempfile, time, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, poll_until, kura_only, stats, free_port


def unix_request(path, data, timeout=5):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout * kuratest.SCALE)
    s.connect(path)
    s.sendall(data)
    got = b""
    while not got.endswith(b"\r\n"):
        b = s.recv(4096)
        if not b:
            break
        got += b
    s.close()
    return got


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


class UnixSocket(unittest.TestCase):

    def setUp(self):
        if kuratest.is_memcached():
            self.skipTest(kuratest.not_applicable("kurad's options"))
        self.dir = tempfile.mkdtemp(prefix="kuratest-unix-")
        os.chmod(self.dir, 0o755)
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, "kura.sock")

    def start(self, *args, **kw):
        s = Server(kura_args=["-s", self.path] + list(args), **kw)
        self.addCleanup(s.stop, check=False)
        poll_until(lambda: os.path.exists(self.path), what="the socket file")
        return s

    def test_default_mode_and_a_mask(self):
        s = self.start()
        self.assertTrue(stat.S_ISSOCK(os.lstat(self.path).st_mode))
        self.assertEqual(mode_of(self.path), 0o700)
        self.assertEqual(unix_request(self.path, b"version\r\n"), b"VERSION 1.6.18\r\n")
        with s.conn() as c:
            self.assertEqual(stats(c, b"settings")["umask"], "700")
        s.stop()
        self.assertFalse(os.path.exists(self.path), "removed at a clean stop")
        for mask, want in (("0666", 0o666), ("640", 0o640)):
            s = self.start("-a", mask)
            self.assertEqual(mode_of(self.path), want)
            with s.conn() as c:
                self.assertEqual(stats(c, b"settings")["umask"], "%o" % want)
            s.stop()
            self.assertFalse(os.path.exists(self.path))

    def test_same_mode_as_memcached(self):
        mc_path = os.path.join(self.dir, "mc.sock")
        if not os.access(kuratest.MEMCACHED, os.X_OK):
            self.skipTest(kuratest.missing("memcached (Debian package memcached)"))
        # memcached with -s listens on nothing else, so not through Server
        user = ["-u", "root"] if os.geteuid() == 0 else []
        ref = subprocess.Popen([kuratest.MEMCACHED, "-s", mc_path, "-a", "0644"] + user,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(ref.wait)
        self.addCleanup(ref.terminate)
        poll_until(lambda: os.path.exists(mc_path), what="memcached's socket")
        self.start("-a", "0644")
        self.assertEqual(os.lstat(mc_path).st_mode, os.lstat(self.path).st_mode)

    def test_owner_is_the_u_user(self):
        if os.geteuid() != 0:
            self.skipTest(kuratest.not_applicable("needs root (to switch to -u nobody)"))
        try:
            nobody = pwd.getpwnam("nobody")
        except KeyError:
            self.skipTest(kuratest.not_applicable("no user nobody"))
        s = Server(kura_args=["-s", self.path], start=False)
        s.argv_orig = s.argv
        s.argv = lambda port: [a if a != "root" else "nobody" for a in s.argv_orig(port)]
        s.start()
        self.addCleanup(s.stop, check=False)
        poll_until(lambda: os.path.exists(self.path), what="the socket file")
        st = os.lstat(self.path)
        self.assertEqual((st.st_uid, st.st_gid), (nobody.pw_uid, nobody.pw_gid))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o700)

    def test_removed_when_start_up_fails(self):
        blocker = socket.socket()
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        port = blocker.getsockname()[1]
        # -s is bound after the TCP port here; a second attempt with a
        # store that cannot open fails after both are bound
        bad_db = os.path.join(self.dir, "no", "such", "dir", "x.kh#bnum=-1")
        s = Server(kura_args=["-s", self.path], start=False)
        argv = s.argv(free_port()) + [bad_db]
        p = subprocess.run(argv, capture_output=True, timeout=60, cwd=s.tmpdir)
        shutil.rmtree(s.tmpdir, True)
        self.assertNotEqual(p.returncode, 0)
        self.assertFalse(os.path.exists(self.path), p.stderr)
        argv = Server(kura_args=["-s", self.path], start=False).argv(port)
        p = subprocess.run(argv, capture_output=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertFalse(os.path.exists(self.path), p.stderr)
        blocker.close()

    def test_stale_socket_replaced_live_one_kept(self):
        s = self.start()
        s.kill9()
        self.assertTrue(os.path.exists(self.path), "a kill -9 leaves the file")
        s2 = self.start()
        self.assertEqual(unix_request(self.path, b"version\r\n"), b"VERSION 1.6.18\r\n")
        # a second kurad on the same path while s2 serves: refused
        argv = Server(kura_args=["-s", self.path], start=False).argv(free_port())
        p = subprocess.run(argv, capture_output=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"a server is listening there already", p.stderr)
        self.assertEqual(unix_request(self.path, b"version\r\n"), b"VERSION 1.6.18\r\n",
                         "the first server still has its socket")
        s2.stop()
        self.assertFalse(os.path.exists(self.path))

    def test_bad_a_values(self):
        for args in (["-s", self.path, "-a", "0999"], ["-s", self.path, "-a", "01777"],
                     ["-s", self.path, "-a", "rw"], ["-a", "0700"]):
            s = Server(kura_args=args, start=False)
            p = subprocess.run(s.argv(free_port()), capture_output=True, timeout=30)
            shutil.rmtree(s.tmpdir, True)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(b"-a", p.stderr)
            self.assertFalse(os.path.exists(self.path))


if __name__ == "__main__":
    kuratest.main()
