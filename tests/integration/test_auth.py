#!/usr/bin/python3
# kura-test: once
"""test_auth.py - memcached's ASCII authentication (-Y FILE).

  Replies    memcached 1.6.18 and kurad started with the same file get the
             same requests, one round trip at a time, and answer the same
             bytes: every command before authentication (text, meta,
             garbage, an empty line), `set` attempts with right and wrong
             passwords, malformed values (no space, a bad termination, too
             short), keys/flags/noreply ignored, `add` not an attempt, LF
             line ends, binary requests (no reply before or after), and the
             text protocol once authenticated (set auth then stores a key);
             requests sent together (a meta set and its data line, a
             failed login and a request, a login after a refusal) get only
             the last of the gate's replies, as memcached's.
  Gate       every command of kura's own (repl, snapshot, digest, the
             listings, stats groups, shutdown) is refused before
             authentication; the negative: the same server without -Y
             answers them.
  Counters   auth_cmds and auth_errors as memcached counts them;
             stats settings' auth_enabled_ascii names the file.
  Loop       a client trying wrong passwords in a loop is answered every
             time (no delay) and counted; another client's requests are
             all answered while it runs.
  File       missing, unreadable (a directory), malformed (no colon, a line
             too long): exit status 2 and one line on stderr; CRLF lines,
             an empty password and no final newline are accepted.
"""
import os, shutil, socket, struct, subprocess, sys, tempfile, threading, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, Closed, stats, free_port, poll_until

SKIP = kuratest.is_memcached()

UNAUTH = b"CLIENT_ERROR unauthenticated\r\n"
BIN_VERSION = bytes([0x80, 0x0b] + [0] * 22)

# Each case: requests sent one at a time on a fresh connection; after each,
# one reply is read, or None: nothing must come.
CASES = [
    [b"version\r\n"], [b"get a\r\n"], [b"stats\r\n"], [b"mg a v\r\n"], [b"mn\r\n"],
    [b"quit\r\n"], [b"bogus\r\n"], [b"flush_all\r\n"], [b"\r\n"], [b"set a 0 0 -1\r\n"],
    [b"set auth 0 0\r\n"], [b"add auth 0 0 12\r\n", b"alice secret\r\n"],
    [b"set auth 0 0 12\r\nalice secret\r\n", b"get a\r\n"],
    [b"set auth 0 0 11\r\nalice wrong\r\n", b"get a\r\n", b"set auth 0 0 12\r\nalice secret\r\n",
     b"set auth 0 0 1\r\nx\r\n", b"get auth\r\n"],
    [b"set auth 0 0 5\r\nalice\r\n"], [b"set auth 0 0 13\r\nalice  secret\r\n"],
    [b"set auth 0 0 13\r\nalice secret \r\n"], [b"set auth 0 0 0\r\n\r\n"],
    [b"set auth 0 0 12 noreply\r\nalice secret\r\n", b"get a\r\n"],
    [b"set anykey 5 100 12\r\nalice secret\r\n", b"get anykey\r\n"],
    [b"set auth 0 0 12\r\nalice secretX\r\n"], [b"set  auth 0 0 12\r\nalice secret\r\n"],
    [b"set auth 0 0 12\r\nalice:secret\r\n"], [b"set auth 0 0 7\r\nbob pw2\r\n"],
    [b"set auth 0 0 9\r\nbob\tpw2 x\r\n"], [b"set auth 0 0 11\r\nalice secre\r\n"],
    [b"set auth 0 0 13\r\nalice secrets\r\n"], [b"set auth 0 0 11\r\nalicesecret\r\n"],
    [b"set auth 0 0 10\r\nbob pw2 xy\r\n"], [b"set auth 0 0 4\r\n:pw3\r\n"],
    [b"set auth 0 0 12\nalice secret\r\n"],
    [BIN_VERSION, None], [b"set auth 0 0 12\r\nalice secret\r\n", BIN_VERSION, None],
    # Requests that arrive together: memcached sends only the last of the
    # gate's replies to them (a meta set's data line is one more request,
    # and so is swallowed), and after a login the rest is served.
    [b"ms foo 1\r\nb\r\n", None], [b"ms foo 2 T0\r\nbb\r\nmn\r\n", None],
    [b"version\r\nversion\r\n", None], [b"set auth 0 0 11\r\nalice wrong\r\nmn\r\n", None],
    [b"mn\r\nset auth 0 0 12\r\nalice secret\r\nmn\r\n", None],
    [b"set auth 0 0 1\r\nalice secret\r\nmn\r\n", None],
]


def run_case(server, steps):
    out = []
    with server.conn(timeout=10) as c:
        i = 0
        while i < len(steps):
            c.send(steps[i])
            if i + 1 < len(steps) and steps[i + 1] is None:
                out.append(c.read_available(0.3) or b"<nothing>")
                i += 2
                continue
            try:
                out.append(c.reply())
            except Closed as e:
                out.append(e.got + b"<closed>")
                break
            i += 1
    return out


class AuthCase(unittest.TestCase):

    def setUp(self):
        if SKIP:
            self.skipTest(kuratest.not_applicable("memcached against itself"))
        self.dir = tempfile.mkdtemp(prefix="kuratest-auth-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.file = os.path.join(self.dir, "auth")
        with open(self.file, "w") as f:
            f.write("alice:secret\nbob:pw2\r\n:pw3\n")

    def kurad(self, *extra):
        s = Server(kind="kurad", kura_args=["-Y", self.file] + list(extra))
        self.addCleanup(s.stop)
        return s

    def test_replies_as_memcached(self):
        ref = Server(kind="memcached", mc_args=["-Y", self.file])
        self.addCleanup(ref.stop)
        dut = self.kurad()
        for steps in CASES:
            try:
                a = run_case(ref, steps)
            except Exception as e:
                raise AssertionError("memcached, %r: %s" % (steps, e))
            self.assertEqual(a, run_case(dut, steps), steps)
        # counted as memcached counts: an attempt with a well-formed value
        a, b = (stats(self.login(s)) for s in (ref, dut))
        for name in ("auth_cmds", "auth_errors"):
            self.assertEqual(a[name], b[name], name)
        self.assertGreater(int(b["auth_errors"]), 3)
        with self.login(dut) as c:
            self.assertEqual(stats(c, b"settings")["auth_enabled_ascii"], self.file)

    def login(self, server):
        c = server.conn(timeout=10)
        self.assertEqual(c.request(b"set auth 0 0 12\r\nalice secret\r\n"), b"STORED\r\n")
        return c

    def test_every_command_behind_the_gate(self):
        cmds = [b"repl 0 2\r\n", b"snapshot\r\n", b"digest\r\n", b"keys a 10\r\n",
                b"rget a b 10\r\n", b"lru_crawler metadump all\r\n", b"stats repl\r\n",
                b"stats conns\r\n", b"stats detail dump\r\n", b"shutdown\r\n",
                b"get a\r\n", b"ms a 1\r\n"]
        s = self.kurad("-ulog", "ulog")
        with s.conn() as c:
            for cmd in cmds:
                self.assertEqual(c.request(cmd), UNAUTH, cmd)
        # the negative: without -Y these are answered (not refused)
        plain = Server(kind="kurad", kura_args=["-ulog", "ulog"])
        self.addCleanup(plain.stop)
        with plain.conn() as c:
            for cmd in cmds[1:4] + cmds[5:10]:
                c.send(cmd)
                r = c.read_available(0.5)
                self.assertTrue(r, cmd)
                self.assertNotIn(b"unauthenticated", r, cmd)
        # and once authenticated, the gate's server answers them too
        with self.login(s) as c:
            self.assertIn(b"DIGEST 0 ", c.transcript(b"digest\r\n"))

    def test_wrong_passwords_in_a_loop(self):
        s = self.kurad()
        n_bad, n_good = 3000, 200
        progress = {"bad": 0}

        def hammer():
            with s.conn(timeout=20) as c:
                for i in range(n_bad):
                    r = c.request(b"set auth 0 0 11\r\nalice wrong\r\n")
                    assert r == b"CLIENT_ERROR authentication failure\r\n", r
                    progress["bad"] = i + 1

        t = threading.Thread(target=hammer)
        t.start()
        poll_until(lambda: progress["bad"] > 10, what="the loop under way")
        with self.login(s) as c:
            c.request(b"set k 0 0 1\r\nv\r\n")
            for _ in range(n_good):
                self.assertEqual(c.request(b"get k\r\n"), b"VALUE k 0 1\r\nv\r\nEND\r\n")
            seen = progress["bad"]
        t.join()
        self.assertEqual(progress["bad"], n_bad)
        print("# another client's %d gets answered while %d of %d failures had been "
              "answered" % (n_good, seen, n_bad), flush=True)
        with self.login(s) as c:
            st = stats(c)
            self.assertEqual(int(st["auth_errors"]), n_bad)
            self.assertEqual(int(st["auth_cmds"]), n_bad + 2)   # and two logins

    def run_kurad(self, path):
        s = Server(kind="kurad", kura_args=["-Y", path], start=False)
        p = subprocess.run(s.argv(free_port()), capture_output=True, timeout=30, cwd=s.tmpdir)
        shutil.rmtree(s.tmpdir, True)
        return p

    def test_bad_files(self):
        def write(name, text):
            path = os.path.join(self.dir, name)
            with open(path, "wb") as f:
                f.write(text)
            return path
        bad = {
            "missing": os.path.join(self.dir, "nope"),
            "a directory": self.dir,
            "no colon": write("nocolon", b"alice:secret\nbob\n"),
            "blank line": write("blank", b"alice:secret\n\n"),
            "line too long": write("long", b"alice:" + b"x" * 2000 + b"\n"),
        }
        for what, path in bad.items():
            p = self.run_kurad(path)
            self.assertEqual(p.returncode, 2, (what, p.stderr))
            lines = p.stderr.decode().strip().splitlines()
            self.assertEqual(len(lines), 1, (what, lines))
            self.assertIn(path, lines[0], what)
        # accepted as memcached accepts them
        for text in (b"alice:secret", b"alice:secret\r\n", b"alice:\n", b""):
            path = write("ok", text)
            s = Server(kind="kurad", kura_args=["-Y", path])
            with s.conn() as c:
                want = b"STORED\r\n" if text.startswith(b"alice:secret") else \
                       b"CLIENT_ERROR authentication failure\r\n"
                self.assertEqual(c.request(b"set auth 0 0 12\r\nalice secret\r\n"), want, text)
            s.stop()


if __name__ == "__main__":
    kuratest.main()
