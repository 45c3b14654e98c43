#!/usr/bin/python3
# kura-test: once
"""test_sasl.py - SASL over the binary protocol (-S, libsasl2).

  Set-up     a sasldb made by saslpasswd2 -a memcached, and a memcached.conf
             (mech_list: plain, sasldb_path) found through SASL_CONF_PATH,
             the same for memcached 1.6.18 -S and kurad -S.
  Replies    both get the same requests and answer the same bytes: list
             mechanisms, PLAIN right and wrong (bad password, unknown user,
             realm, authzid, no NULs, empty data: continue), requests before
             authentication (get, noop, stat, quit, an unknown opcode: Auth
             failure and close; version served), step before auth, a
             mechanism name over 32 bytes, list mechanisms with a body,
             re-authentication and list mechanisms after it (the connection
             is unauthenticated again), storing and reading once
             authenticated, data past the item size limit (Out of memory,
             skipped).  stats settings' auth_enabled_sasl and
             binding_protocol alike.  One byte at a time answers the same.
  Text       every text command (kura's own included: repl, snapshot,
             digest, keys, stats) and Tokyo Tyrant's protocol get nothing
             and the connection closes, as memcached -S closes it; the
             negative: the same kurad without -S answers them.  With -Y
             too, -Y wins as in memcached (text with ASCII auth, no binary).
  Clients    pylibmc (binary=True, username, password) stores and reads
             keys; with a wrong password it gets nothing stored; libmemcached's
             memccp/memccat with -u/-p do the same.
  Counters   wrong passwords in a loop are each answered and counted
             (auth_cmds, auth_errors as memcached counts them) while another
             client is served.
  Setup      MEMCACHED_SASL_PWDB (user:password lines) authenticates too; a
             malformed one, or no memcached.conf at all, stops kurad with
             exit status 2 and one line.
Skipped as missing without saslpasswd2 (sasl2-bin), libsasl2's PLAIN
plug-in (libsasl2-modules) or a kurad built with libsasl2 (libsasl2-dev).
"""
import glob, os, shutil, socket, struct, subprocess, sys, tempfile, threading, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, free_port, poll_until

SKIP = kuratest.is_memcached()
SASLPASSWD2 = shutil.which("saslpasswd2") or "/usr/sbin/saslpasswd2"

OP_GET, OP_SET, OP_QUIT, OP_NOOP, OP_VERSION, OP_STAT = 0x00, 0x01, 0x07, 0x0a, 0x0b, 0x10
OP_MECHS, OP_AUTH, OP_STEP = 0x20, 0x21, 0x22


def req(op, key=b"", val=b"", ext=b"", opaque=0x11223344):
    return struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(ext), 0, 0,
                       len(ext) + len(key) + len(val), opaque, 0) + ext + key + val


def plain(user, password, authzid=b""):
    return req(OP_AUTH, b"PLAIN", authzid + b"\0" + user + b"\0" + password)


LOGIN = plain(b"alice", b"secret")
SET_K = req(OP_SET, b"k", b"value", ext=bytes(8))
GET_K = req(OP_GET, b"k")
END = req(OP_VERSION, opaque=0xfeedface)        # the last reply of a case, if it stays open

CASES = [
    [req(OP_MECHS)],
    [LOGIN, SET_K, GET_K],
    [plain(b"alice", b"wrong"), GET_K],
    [plain(b"bob", b"secret")], [plain(b"alice@" + socket.gethostname().encode(), b"secret")],
    [plain(b"alice", b"secret", authzid=b"alice")], [req(OP_AUTH, b"PLAIN", b"alice")],
    [req(OP_AUTH, b"PLAIN", b"")], [req(OP_AUTH, b"plain", b"\0alice\0secret")],
    [req(OP_AUTH, b"NOSUCH", b"x")], [req(OP_AUTH, b"A" * 40, b"x")],
    [req(OP_STEP, b"PLAIN", b"\0alice\0secret")],
    [GET_K], [req(OP_NOOP)], [req(OP_STAT)], [req(OP_QUIT)], [req(0x55)], [SET_K],
    [req(OP_MECHS, b"x")],
    [LOGIN, req(OP_MECHS), GET_K], [LOGIN, plain(b"alice", b"bad"), GET_K], [LOGIN, LOGIN, GET_K],
    [LOGIN, req(0x09, b"missing"), req(OP_NOOP)], [LOGIN, req(OP_STAT, b"nosuchgroup")],
    # data past the item size limit: Out of memory, skipped as it arrives
    [req(OP_AUTH, b"PLAIN", b"\0alice\0" + b"x" * (2 << 20)), LOGIN, GET_K],
]


def read_packets(sock, timeout=10):
    """Replies until END's (opaque 0xfeedface) or the server closes."""
    sock.settimeout(timeout)
    data = b""
    while True:
        pos = 0
        while len(data) - pos >= 24:
            blen = struct.unpack(">I", data[pos + 8:pos + 12])[0]
            if len(data) - pos < 24 + blen:
                break
            if data[pos + 12:pos + 16] == b"\xfe\xed\xfa\xce":
                return data[:pos]
            pos += 24 + blen
        got = sock.recv(65536)
        if not got:
            return data + b"<closed>"
        data += got


def converse(server, steps):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"".join(steps) + END)
        return read_packets(s)


def scrub_cas(data):
    """Replies with their cas zeroed: memcached's and kurad's counters differ."""
    out, pos = bytearray(), 0
    while len(data) - pos >= 24 and data[pos] == 0x81:
        blen = struct.unpack(">I", data[pos + 8:pos + 12])[0]
        out += data[pos:pos + 16] + bytes(8) + data[pos + 24:pos + 24 + blen]
        pos += 24 + blen
    return bytes(out) + data[pos:]


def bin_stats(server, group=b""):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(LOGIN + req(OP_STAT, group) + END)
        data = read_packets(s)
    d, pos = {}, 24 + 13                # past the login's reply
    while pos + 24 <= len(data):
        klen = struct.unpack(">H", data[pos + 2:pos + 4])[0]
        blen = struct.unpack(">I", data[pos + 8:pos + 12])[0]
        if klen:
            d[data[pos + 24:pos + 24 + klen].decode()] = \
                data[pos + 24 + klen:pos + 24 + blen].decode()
        pos += 24 + blen
    return d


def sasl_setup(case):
    """A sasldb with alice:secret and a memcached.conf (mech_list: plain) in
    case.dir (made here), case.env naming it; skips where it cannot be."""
    if SKIP:
        case.skipTest(kuratest.not_applicable("memcached against itself"))
    if not os.access(SASLPASSWD2, os.X_OK):
        case.skipTest(kuratest.missing("saslpasswd2 (apt-get install sasl2-bin)"))
    if not glob.glob("/usr/lib/*/sasl2/libplain.so*") + glob.glob("/usr/lib/sasl2/libplain.so*"):
        case.skipTest(kuratest.missing("libsasl2's PLAIN (apt-get install libsasl2-modules)"))
    case.dir = tempfile.mkdtemp(prefix="kuratest-sasl-")
    case.addCleanup(shutil.rmtree, case.dir, True)
    db = os.path.join(case.dir, "sasldb")
    subprocess.run([SASLPASSWD2, "-a", "memcached", "-c", "-p", "-f", db, "alice"],
                   input=b"secret", check=True, timeout=30)
    with open(os.path.join(case.dir, "memcached.conf"), "w") as f:
        f.write("mech_list: plain\nsasldb_path: %s\n" % db)
    case.env = {"SASL_CONF_PATH": case.dir}
    p = subprocess.run([kuratest.kurad_path(), "-S", "-port", "0"], capture_output=True, timeout=30,
                       env=dict(os.environ, **case.env))
    if b"without SASL" in p.stderr:
        case.skipTest(kuratest.missing("kurad with SASL (apt-get install libsasl2-dev, "
                                       "then build again)"))


class SaslCase(unittest.TestCase):

    def setUp(self):
        sasl_setup(self)

    def kurad(self, *extra, env=None):
        s = Server(kind="kurad", kura_args=["-S"] + list(extra), env=env or self.env)
        self.addCleanup(s.stop)
        return s

    def memcached(self):
        s = Server(kind="memcached", mc_args=["-S"], env=self.env)
        self.addCleanup(s.stop)
        return s

    def test_replies_as_memcached(self):
        ref, dut = self.memcached(), self.kurad()
        for steps in CASES:
            a = scrub_cas(converse(ref, steps))
            self.assertEqual(a, scrub_cas(converse(dut, steps)), steps)
        self.assertIn(b"Auth failure.", a + converse(dut, [GET_K]))   # the test sees failures
        a, b = bin_stats(ref, b"settings"), bin_stats(dut, b"settings")
        for name in ("auth_enabled_sasl", "binding_protocol"):
            self.assertEqual(a[name], b[name], name)
        self.assertEqual(b["auth_enabled_sasl"], "yes")

    def test_byte_at_a_time(self):
        s = self.kurad()
        whole = converse(s, [LOGIN, SET_K, GET_K])
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for b in LOGIN + SET_K + GET_K + END:
                c.sendall(bytes([b]))
            self.assertEqual(scrub_cas(read_packets(c)), scrub_cas(whole))
        self.assertTrue(whole.endswith(b"value"), whole)

    def test_counted_as_memcached(self):
        ref, dut = self.memcached(), self.kurad()
        steps = [plain(b"alice", b"wrong"), plain(b"bob", b"x"), LOGIN,
                 req(OP_STEP, b"PLAIN", b"x"), req(OP_AUTH, b"PLAIN", b"")]
        for s in (ref, dut):
            converse(s, steps)
        a, b = bin_stats(ref), bin_stats(dut)
        for name in ("auth_cmds", "auth_errors"):
            self.assertEqual(a[name], b[name], name)
        self.assertEqual(b["auth_errors"], "3")

    def test_text_and_kura_commands_refused(self):
        cmds = [b"version\r\n", b"get k\r\n", b"stats\r\n", b"repl 0 2\r\n", b"snapshot\r\n",
                b"digest\r\n", b"keys a 10\r\n", b"stats repl\r\n", b"mn\r\n",
                b"lru_crawler metadump all\r\n"]
        s = self.kurad("-ulog", "ulog")
        ref = self.memcached()
        for cmd in cmds:
            # memcached reads a whole 24-byte header before it looks at the magic
            line = cmd.ljust(24, b" ") if len(cmd) < 24 else cmd
            for srv in (ref, s):
                with srv.conn(timeout=10) as c:
                    c.send(line)
                    self.assertEqual(c.read_to_close(), b"", (srv.kind, cmd))
        tt = bytes([0xC8, 0x80]) + bytes(22)    # Tokyo Tyrant's put, not served
        with s.conn(timeout=10) as c:
            c.send(tt)
            self.assertEqual(c.read_to_close(), b"")
        # the negative: without -S the same kurad answers them
        plain_s = Server(kind="kurad", kura_args=["-ulog", "ulog"])
        self.addCleanup(plain_s.stop)
        with plain_s.conn() as c:
            for cmd in cmds[:3] + cmds[5:7]:
                c.send(cmd)
                self.assertTrue(c.read_available(0.5), cmd)

    def test_ascii_auth_wins(self):
        # -S with -Y: memcached serves the text protocol with ASCII auth
        pw = os.path.join(self.dir, "auth")
        with open(pw, "w") as f:
            f.write("alice:secret\n")
        ref = Server(kind="memcached", mc_args=["-S", "-Y", pw], env=self.env)
        self.addCleanup(ref.stop)
        dut = self.kurad("-Y", pw)
        for srv in (ref, dut):
            with srv.conn(timeout=10) as c:
                self.assertEqual(c.request(b"version\r\n"), b"CLIENT_ERROR unauthenticated\r\n")
            with srv.conn(timeout=10) as c:
                c.send(req(OP_MECHS))
                self.assertEqual(c.read_available(0.3), b"", srv.kind)

    def test_pylibmc(self):
        try:
            import pylibmc
        except ImportError:
            self.skipTest(kuratest.missing("pylibmc (apt-get install python3-pylibmc)"))
        if not pylibmc.support_sasl:
            self.skipTest(kuratest.missing("pylibmc with SASL (Debian's python3-pylibmc)"))
        s = self.kurad()
        addr = ["127.0.0.1:%d" % s.port]
        mc = pylibmc.Client(addr, binary=True, username="alice", password="secret")
        self.addCleanup(mc.disconnect_all)
        for i in range(50):
            self.assertTrue(mc.set("key%d" % i, b"value%d" % i))
        self.assertEqual(mc.get_multi(["key%d" % i for i in range(50)]),
                         {"key%d" % i: b"value%d" % i for i in range(50)})
        self.assertEqual(mc.incr("n", 1) if mc.add("n", 1) else None, 2)
        bad = pylibmc.Client(addr, binary=True, username="alice", password="wrong")
        self.addCleanup(bad.disconnect_all)
        with self.assertRaises(pylibmc.Error):
            bad.set("evil", b"x")
        self.assertIsNone(mc.get("evil"))
        st = bin_stats(s)
        self.assertGreaterEqual(int(st["auth_errors"]), 1)

    def test_libmemcached_tools(self):
        memccp, memccat = shutil.which("memccp"), shutil.which("memccat")
        if not memccp or not memccat:
            self.skipTest(kuratest.missing("memccp (apt-get install libmemcached-tools)"))
        s = self.kurad()
        src = os.path.join(self.dir, "file1")
        with open(src, "w") as f:
            f.write("hello sasl\n")
        srv = "--servers=127.0.0.1:%d" % s.port
        cred = ["--binary", "--username=alice", "--password=secret"]
        subprocess.run([memccp, srv] + cred + [src], check=True, timeout=30, cwd=self.dir)
        p = subprocess.run([memccat, srv] + cred + ["file1"], capture_output=True, timeout=30)
        self.assertEqual(p.stdout.rstrip(b"\n"), b"hello sasl")   # memccat adds a newline
        p = subprocess.run([memccat, srv, "--binary", "--username=alice", "--password=nope",
                            "file1"], capture_output=True, timeout=30)
        self.assertNotEqual(p.stdout, b"hello sasl\n")
        self.assertNotEqual(p.returncode, 0)

    def test_wrong_passwords_in_a_loop(self):
        s = self.kurad()
        n_bad, n_good = 1000, 100
        progress = {"bad": 0}
        fail = b"\x81\x21" + bytes(4) + b"\x00\x20" + struct.pack(">I", 13)

        def hammer():
            with socket.create_connection(("127.0.0.1", s.port), timeout=20) as c:
                for i in range(n_bad):
                    c.sendall(plain(b"alice", b"wrong%d" % i) + END)
                    r = read_packets(c)
                    assert r.startswith(fail) and r.endswith(b"Auth failure."), r
                    progress["bad"] = i + 1

        t = threading.Thread(target=hammer)
        t.start()
        poll_until(lambda: progress["bad"] > 10, what="the loop under way")
        with socket.create_connection(("127.0.0.1", s.port), timeout=20) as c:
            c.sendall(LOGIN + SET_K + END)
            read_packets(c)
            for _ in range(n_good):
                c.sendall(GET_K + END)
                self.assertTrue(read_packets(c).endswith(b"value"))
        seen = progress["bad"]
        t.join()
        self.assertEqual(progress["bad"], n_bad)
        print("# another client's %d gets answered while %d of %d failures had been "
              "answered" % (n_good, seen, n_bad), flush=True)
        st = bin_stats(s)
        self.assertEqual(int(st["auth_errors"]), n_bad)
        self.assertEqual(int(st["auth_cmds"]), n_bad + 2)      # and two logins

    def test_pwdb(self):
        pwdb = os.path.join(self.dir, "pwdb")
        with open(pwdb, "w") as f:
            f.write("carol:pw9\n")
        s = self.kurad(env=dict(self.env, MEMCACHED_SASL_PWDB=pwdb))
        ok = converse(s, [plain(b"carol", b"pw9")])
        self.assertTrue(ok.endswith(b"Authenticated"), ok)
        self.assertTrue(converse(s, [plain(b"carol", b"pw8")]).endswith(b"Auth failure."))
        self.assertTrue(converse(s, [LOGIN]).endswith(b"Authenticated"))   # sasldb still

    def run_kurad(self, env):
        s = Server(kind="kurad", kura_args=["-S"], start=False)
        p = subprocess.run(s.argv(free_port()), capture_output=True, timeout=30, cwd=s.tmpdir,
                           env=env)
        shutil.rmtree(s.tmpdir, True)
        return p

    def test_bad_setup(self):
        bad = os.path.join(self.dir, "badpwdb")
        with open(bad, "w") as f:
            f.write("carol\n")
        cases = {"malformed MEMCACHED_SASL_PWDB": dict(os.environ, MEMCACHED_SASL_PWDB=bad,
                                                       **self.env),
                 "missing MEMCACHED_SASL_PWDB": dict(os.environ, **self.env,
                                                     MEMCACHED_SASL_PWDB=bad + "x")}
        if not any(os.path.exists(p) for p in ("/etc/sasl/memcached.conf",
                                                "/etc/sasl2/memcached.conf")):
            env = dict(os.environ)
            env.pop("SASL_CONF_PATH", None)
            cases["no memcached.conf"] = env
        for what, env in cases.items():
            p = self.run_kurad(env)
            self.assertEqual(p.returncode, 2, (what, p.stderr))
            lines = p.stderr.decode().strip().splitlines()
            self.assertEqual(len(lines), 1, (what, lines))
            self.assertIn("-S", lines[0], what)


if __name__ == "__main__":
    kuratest.main()
