#!/usr/bin/python3
# kura-test: once
"""test_tls.py - TLS as memcached 1.6 does it (-Z, -o ssl_*, notls:,
refresh_certs), replication and kuractl over TLS: docs/security.md.

Certificates are made in a temp dir with the openssl CLI: a CA, a server
certificate it signs (localhost, 127.0.0.1), a client certificate, and a
second ("rogue") CA with a server certificate of its own.

  Serving     sets and gets (a 1 MB value among them) over TLS with
              Python's ssl module; a notls: listener beside it serves
              plaintext; plaintext on the TLS port gets no byte and the
              connection is closed (as memcached), counted in
              ssl_handshake_errors.  20 KB and 1 MB values from the
              tree, sent by reference (a piece a write, kurad's send
              buffer at 16 KiB), byte-exact, every hold released.
  Compared    with memcached -Z on the same files: the ssl_* lines of
              "stats settings" byte for byte, the ssl_* names of "stats",
              the replies of refresh_certs (success, a key file gone, not
              enabled) byte for byte, and the plaintext probe's effect.
  Hostile     handshakes that stall hold a slot of -c only until the
              handshake timeout (then closed, counted), one that drips a
              byte at a time too (the time runs from accept); garbage instead of
              a ClientHello is closed and counted; a record header that
              promises 16 KB and stalls is closed at the timeout.  The
              negative: with the timeout off (the test switch), a stalled
              handshake is still open after the bounded one was closed.
  Files       a certificate or key missing, a directory, garbage, a key
              that does not match, -Z without a certificate: exit 2 and
              one line; refresh_certs with a broken file: the error reply
              and the old certificate still served; SIGHUP loads a new one.
  verify      ssl_verify_mode=2 with ssl_ca_cert: a client without a
              certificate is refused, one with the CA's is served.
  pymemcache  its Client with tls_context.
  Replica     -mtls -mtls-ca: a replica follows a TLS master; the negative:
              one whose CA does not sign the master's certificate refuses
              it (repl_last_error says why, no row applied), and one
              without -mtls cannot follow a TLS port.
  kuractl     -tls-ca: stats and repl status over TLS; the rogue CA: exit
              3 with the reason; no -tls against a TLS port: exit 3.
"""
import os, shutil, signal, socket, ssl, subprocess, sys, tempfile, time, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kuratest
from kuratest import Server, Conn, Closed, stats, free_port, poll_until, kura_only
from test_kuractl import run as kuractl

OPENSSL = shutil.which("openssl")


def sh(*args, cwd):
    subprocess.run(list(args), cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(d):
    """CA, server (localhost, 127.0.0.1), client, and a rogue CA and its server."""
    ext = os.path.join(d, "san.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for ca in ("ca", "rogue"):
        sh(OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca + ".key",
           "-out", ca + ".pem", "-days", "2", "-subj", "/CN=kura test " + ca, cwd=d)
    for name, ca in (("srv", "ca"), ("srv2", "ca"), ("client", "ca"), ("rsrv", "rogue")):
        sh(OPENSSL, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out",
           name + ".csr", "-subj", "/CN=localhost", cwd=d)
        sh(OPENSSL, "x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey",
           ca + ".key", "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", ext,
           cwd=d)
    # the client's certificate and key in one file (kuractl -tls-cert, -mtls-cert)
    with open(os.path.join(d, "client.both"), "wb") as f:
        for part in ("client.pem", "client.key"):
            with open(os.path.join(d, part), "rb") as p:
                f.write(p.read())
    for n in os.listdir(d):
        os.chmod(os.path.join(d, n), 0o644)
    os.chmod(d, 0o755)


def kurad_has_tls():
    """None, or why kurad cannot serve TLS here."""
    if not OPENSSL:
        return kuratest.missing("the openssl command (Debian: openssl)")
    p = subprocess.run([kuratest.kurad_path(), "-Z", "-o", "ssl_chain_cert=/nonexistent"],
                       capture_output=True, timeout=30)
    if b"without OpenSSL" in p.stderr:
        return kuratest.missing("kurad built without OpenSSL (Debian: libssl-dev)")
    return None


class TlsConn(Conn):
    """kuratest's Conn over TLS (Python's ssl module)."""

    def __init__(self, port, ctx, host="localhost", timeout=5):
        Conn.__init__(self, port, timeout=timeout)
        self.sock = ctx.wrap_socket(self.sock, server_hostname=host)
        self.cert = self.sock.getpeercert()


JUNK = [b"\x16\x03\x01\x00\x05hello", b"\x00" * 64, b"GET / HTTP/1.0\r\n\r\n",
        bytes(range(256)) * 2]


def probe(port, data):
    """What a peer sending data gets back before the close (a reset ends it too)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10 * kuratest.SCALE)
    out = b""
    try:
        s.sendall(data)
        while True:
            b = s.recv(4096)
            if not b:
                break
            out += b
    except ConnectionResetError:
        pass
    finally:
        s.close()
    return out


def ssl_lines(blob):
    return [l for l in blob.split(b"\r\n") if l.startswith(b"STAT ssl_") or
            l.startswith(b"STAT time_since_server_cert_refresh")]


def stats_raw(port, sub=b""):
    with Conn(port) as c:
        c.send(b"stats" + (b" " + sub if sub else b"") + b"\r\n")
        return c.recv_until(b"END\r\n")


@kura_only
class Tls(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        why = kurad_has_tls()
        if why:
            raise unittest.SkipTest(why)
        cls.dir = tempfile.mkdtemp(prefix="kuratest-tls-")
        make_certs(cls.dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def client_ctx(self, ca="ca.pem", cert=None):
        ctx = ssl.create_default_context(cafile=self.path(ca))
        if cert:
            ctx.load_cert_chain(self.path(cert + ".pem"), self.path(cert + ".key"))
        return ctx

    def tls_opts(self, cert="srv", extra=""):
        return "ssl_chain_cert=%s,ssl_key=%s%s" % (self.path(cert + ".pem"),
                                                   self.path(cert + ".key"), extra)

    def kurad(self, extra=(), cert="srv", opts="", notls=True, env=None, **kw):
        """kurad -Z; with notls, a plaintext listener beside it (self.plain)."""
        args = ["-Z", "-o", self.tls_opts(cert, opts)] + list(extra)
        if notls:
            self.plain = free_port()
            args += ["-host", "127.0.0.1,notls:127.0.0.1:%d" % self.plain]
        s = Server(kind="kurad", kura_args=args, env=env, **kw)
        self.addCleanup(s.stop, check=False)
        return s

    def errors(self, port):
        st = stats(Conn(port))
        return int(st["ssl_handshake_errors"])

    # -- serving ---------------------------------------------------------
    def test_serving(self):
        s = self.kurad()
        with TlsConn(s.port, self.client_ctx()) as c:
            self.assertEqual(c.request(b"set a 0 0 1\r\nx\r\n"), b"STORED\r\n")
            self.assertEqual(c.request(b"get a\r\n"), b"VALUE a 0 1\r\nx\r\nEND\r\n")
            big = os.urandom(512 << 10)
            self.assertEqual(c.request(b"set big 5 0 %d\r\n%s\r\n" % (len(big), big)),
                             b"STORED\r\n")
            # a pipeline of gets of the large value: replies past the high-water mark
            c.send(b"get big\r\n" * 8 + b"version\r\n")
            want = b"VALUE big 5 %d\r\n%s\r\nEND\r\n" % (len(big), big)
            for _ in range(8):
                self.assertEqual(c.recv_exact(len(want), timeout=30), want)
            self.assertTrue(c.line().startswith(b"VERSION "))
        with Conn(self.plain) as p:                    # notls: plaintext served
            self.assertEqual(p.request(b"get a\r\n"), b"VALUE a 0 1\r\nx\r\nEND\r\n")
        before = self.errors(self.plain)
        with Conn(s.port) as p:                        # plaintext on the TLS port
            p.send(b"version\r\n")
            self.assertEqual(p.read_to_close(timeout=10), b"")
        poll_until(lambda: self.errors(self.plain) == before + 1, what="the probe counted")

    def test_tree_values_by_reference(self):
        """Large values from the tree go out by reference (buf.h): over
        TLS a piece at a time, with a 16 KiB send buffer (KURA_TEST_SNDBUF)
        so that every reply takes many partial writes; byte-exact, and
        every hold released once read."""
        s = self.kurad(db="%t/data.kb", item_max="2m", env={"KURA_TEST_SNDBUF": "8192"})
        with TlsConn(s.port, self.client_ctx()) as c:
            for size in (20 << 10, 1 << 20):
                big = os.urandom(size)
                self.assertEqual(c.request(b"set big 5 0 %d\r\n%s\r\n" % (size, big)),
                                 b"STORED\r\n")
                c.send(b"get big big\r\n" + b"mg big v\r\n" * 3 + b"version\r\n")
                want = b"VALUE big 5 %d\r\n%s\r\n" % (size, big)
                self.assertEqual(c.recv_exact(2 * len(want) + 5, timeout=30),
                                 want * 2 + b"END\r\n")
                want = b"VA %d\r\n%s\r\n" % (size, big)
                for _ in range(3):
                    self.assertEqual(c.recv_exact(len(want), timeout=30), want)
                self.assertTrue(c.line().startswith(b"VERSION "))
        poll_until(lambda: stats(Conn(self.plain))["tree_value_cache_held_bytes"] == "0",
                   what="every hold released")
        self.assertGreater(int(stats(Conn(self.plain))["tree_value_cache_hits"]), 0)

    # -- memcached -Z beside kurad --------------------------------------
    def test_compared_with_memcached(self):
        if not os.access(kuratest.MEMCACHED, os.X_OK):
            self.skipTest(kuratest.missing("memcached"))
        mport = free_port()
        # memcached joins its -l options: the harness's 127.0.0.1 and this one
        mc = Server(kind="memcached", mc_args=["-Z", "-o", self.tls_opts(), "-l",
                                                "notls:127.0.0.1:%d" % mport])
        self.addCleanup(mc.stop, check=False)
        k = self.kurad()
        for port in (mc.port, k.port):                 # both serve TLS alike
            with TlsConn(port, self.client_ctx()) as c:
                self.assertEqual(c.request(b"set a 0 0 1\r\nx\r\n"), b"STORED\r\n")
        ref, got = stats_raw(mport, b"settings"), stats_raw(self.plain, b"settings")
        self.assertEqual(ssl_lines(got), ssl_lines(ref))
        self.assertEqual(len(ssl_lines(got)), 11)
        names = lambda b: [l.split(b" ")[1] for l in ssl_lines(b)]
        self.assertEqual(names(stats_raw(self.plain)), names(stats_raw(mport)))
        # the plaintext probe and garbage instead of a ClientHello: the same
        # bytes back (none, or OpenSSL's alert for a record it could parse).
        # kurad counts each; memcached only those its SSL_accept at accept
        # time already sees (it depends on timing), so its count is a bound
        counts = lambda: (self.errors(mport), self.errors(self.plain))
        m0, k0 = counts()
        for junk in [b"version\r\n"] + JUNK:
            self.assertEqual(probe(k.port, junk), probe(mc.port, junk), junk)
        n = 1 + len(JUNK)
        poll_until(lambda: counts()[1] == k0 + n, what="kurad counted each")
        self.assertLessEqual(counts()[0], m0 + n)
        # refresh_certs: OK, then a key file gone: the same error line
        for port in (mport, self.plain):
            with Conn(port) as c:
                self.assertEqual(c.request(b"refresh_certs\r\n"), b"OK\r\n")
        key = self.path("srv.key")
        os.rename(key, key + ".away")
        try:
            replies = []
            for port in (mport, self.plain):
                with Conn(port) as c:
                    c.send(b"refresh_certs\r\n")
                    replies.append(c.line())
        finally:
            os.rename(key + ".away", key)
        self.assertEqual(replies[1], replies[0])
        self.assertTrue(replies[0].startswith(b"Error loading the key: " + key.encode()),
                        replies[0])
        # without -Z
        mc2 = Server(kind="memcached")
        self.addCleanup(mc2.stop, check=False)
        k2 = Server(kind="kurad")
        self.addCleanup(k2.stop, check=False)
        replies = [Conn(s.port).request(b"refresh_certs\r\n") for s in (mc2, k2)]
        self.assertEqual(replies, [b"Error TLS not enabled\r\n"] * 2)
        self.assertEqual(ssl_lines(stats_raw(k2.port, b"settings")),
                         ssl_lines(stats_raw(mc2.port, b"settings")))
        self.assertEqual(ssl_lines(stats_raw(k2.port)), [])

    # -- hostile peers ----------------------------------------------------
    def stalled(self, port, n, send=b""):
        socks = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            if send:
                s.sendall(send)
            socks.append(s)
        return socks

    def closed(self, s):
        s.settimeout(0.05)
        try:
            return s.recv(1) == b""
        except socket.timeout:
            return False
        except OSError:
            return True

    def test_stalled_handshakes_bounded(self):
        s = self.kurad(conns=12, opts=",ssl_handshake_timeout=2")
        before = self.errors(self.plain)
        # silent peers, and one that promises a 16 KB record and stops
        socks = self.stalled(s.port, 6) + self.stalled(s.port, 1, b"\x16\x03\x01\x40\x00\x01")
        # and one that drips its record a byte at a time: the timeout runs
        # from accept, not from its last byte (at this pace the record would
        # take minutes)
        drip, = self.stalled(s.port, 1, b"\x16\x03\x01\x40\x00")
        def dripped_out():
            try:
                drip.send(b"\x01")
            except OSError:
                return True
            return self.closed(drip)
        poll_until(dripped_out, timeout=20, interval=0.05, what="the dripping peer closed")
        socks.append(drip)
        poll_until(lambda: all(self.closed(x) for x in socks), timeout=20,
                   what="the stalled handshakes closed by the timeout")
        poll_until(lambda: self.errors(self.plain) >= before + 8, what="counted")
        # their slots of -c are back: a full set of TLS clients is served
        conns = []
        for _ in range(8):              # each held open: 8 slots at once
            conns.append(TlsConn(s.port, self.client_ctx()))
            self.assertEqual(conns[-1].request(b"version\r\n")[:8], b"VERSION ")
        for c in conns:
            c.close()
        for x in socks:
            x.close()

    def test_stall_unbounded_without_the_timeout(self):
        """The negative: the handshake timeout off (-o
        ssl_handshake_timeout=0), a silent peer holds its slot after a
        bounded one was closed."""
        bounded = self.kurad(opts=",ssl_handshake_timeout=1")
        unbounded = Server(kind="kurad", kura_args=[
            "-Z", "-o", self.tls_opts(extra=",ssl_handshake_timeout=0")])
        self.addCleanup(unbounded.stop, check=False)
        a, = self.stalled(unbounded.port, 1)
        b, = self.stalled(bounded.port, 1)
        poll_until(lambda: self.closed(b), timeout=20, what="the bounded one closed")
        time.sleep(0.5)                 # the unbounded one had as long and longer
        self.assertFalse(self.closed(a))
        a.close()
        b.close()

    def test_garbage_client_hello(self):
        s = self.kurad()
        before = self.errors(self.plain)
        for junk in JUNK + [os.urandom(512)]:
            got = probe(s.port, junk)
            # nothing, or a TLS alert record: never a memcached reply
            self.assertTrue(got == b"" or got.startswith(b"\x15\x03"), (junk, got))
        poll_until(lambda: self.errors(self.plain) == before + len(JUNK) + 1, what="counted")
        with TlsConn(s.port, self.client_ctx()) as c:        # still serving
            self.assertEqual(c.request(b"version\r\n")[:8], b"VERSION ")

    # -- files ----------------------------------------------------------
    def start_fails(self, opts, z=True):
        s = Server(kind="kurad", kura_args=(["-Z"] if z else []) + ["-o", opts], start=False)
        p = subprocess.run(s.argv(free_port()), capture_output=True, timeout=30, cwd=s.tmpdir)
        shutil.rmtree(s.tmpdir, True)
        return p

    def test_bad_files(self):
        garbage = self.path("garbage.pem")
        with open(garbage, "w") as f:
            f.write("not a certificate\n")
        cert, key = self.path("srv.pem"), self.path("srv.key")
        bad = {
            "cert missing": ("ssl_chain_cert=%s,ssl_key=%s" % (self.path("nope"), key),
                             self.path("nope")),
            "cert a directory": ("ssl_chain_cert=%s,ssl_key=%s" % (self.dir, key), self.dir),
            "cert garbage": ("ssl_chain_cert=%s,ssl_key=%s" % (garbage, key), garbage),
            "key missing": ("ssl_chain_cert=%s,ssl_key=%s" % (cert, self.path("nokey")),
                            self.path("nokey")),
            "key garbage": ("ssl_chain_cert=%s,ssl_key=%s" % (cert, garbage), garbage),
            "key of another": ("ssl_chain_cert=%s,ssl_key=%s" % (cert, self.path("srv2.key")),
                               self.path("srv2.key")),
            "CA missing": (self.tls_opts(extra=",ssl_ca_cert=" + self.path("noca")),
                           self.path("noca")),
            "no certificate": ("ssl_verify_mode=0", "ssl_chain_cert"),
            "bad verify mode": (self.tls_opts(extra=",ssl_verify_mode=7"), "ssl_verify_mode"),
            "bad version": (self.tls_opts(extra=",ssl_min_version=9"), "ssl_min_version"),
            "bad handshake timeout": (self.tls_opts(extra=",ssl_handshake_timeout=-1"),
                                      "ssl_handshake_timeout"),
            "unknown option": (self.tls_opts(extra=",no_such_opt=1"), "no_such_opt"),
        }
        for what, (opts, name) in bad.items():
            p = self.start_fails(opts)
            self.assertEqual(p.returncode, 2, (what, p.stderr))
            lines = p.stderr.decode().strip().splitlines()
            self.assertEqual(len(lines), 1, (what, lines))
            self.assertIn(name, lines[0], what)

    def test_refresh(self):
        d = tempfile.mkdtemp(prefix="kuratest-tlsref-", dir=self.dir)
        cert, key = os.path.join(d, "c.pem"), os.path.join(d, "c.key")
        shutil.copy(self.path("srv.pem"), cert)
        shutil.copy(self.path("srv.key"), key)
        s = Server(kind="kurad", kura_args=["-Z", "-o", "ssl_chain_cert=%s,ssl_key=%s" %
                                            (cert, key)])
        self.addCleanup(s.stop, check=False)
        serial = lambda: TlsConn(s.port, self.client_ctx()).cert["serialNumber"]
        first = serial()
        # a broken file: the error, and the old certificate still served
        with open(key, "w") as f:
            f.write("broken\n")
        with TlsConn(s.port, self.client_ctx()) as c:
            c.send(b"refresh_certs\r\n")
            self.assertTrue(c.line().startswith(b"Error loading the key: " + key.encode()))
        self.assertEqual(serial(), first)
        self.assertIn("the old certificates stay", s.stderr())
        # a new certificate: refresh_certs, then SIGHUP, load it
        shutil.copy(self.path("srv2.pem"), cert)
        shutil.copy(self.path("srv2.key"), key)
        with TlsConn(s.port, self.client_ctx()) as c:
            self.assertEqual(c.request(b"refresh_certs\r\n"), b"OK\r\n")
        second = serial()
        self.assertNotEqual(second, first)
        shutil.copy(self.path("srv.pem"), cert)
        shutil.copy(self.path("srv.key"), key)
        s.proc.send_signal(signal.SIGHUP)
        poll_until(lambda: serial() == first, what="SIGHUP loaded the certificate")

    def test_verify_clients(self):
        s = self.kurad(opts=",ssl_verify_mode=2,ssl_ca_cert=" + self.path("ca.pem"))
        with TlsConn(s.port, self.client_ctx(cert="client")) as c:
            self.assertEqual(c.request(b"version\r\n")[:8], b"VERSION ")
        before = self.errors(self.plain)
        try:
            # TLS 1.3: the refusal may surface at the handshake or at the first read
            with TlsConn(s.port, self.client_ctx()) as c:
                c.send(b"version\r\n")
                self.assertEqual(c.read_to_close(timeout=10), b"")
        except (ssl.SSLError, ConnectionResetError, Closed):
            pass
        poll_until(lambda: self.errors(self.plain) == before + 1, what="the refusal counted")

    def test_pymemcache(self):
        try:
            from pymemcache.client.base import Client
        except ImportError:
            self.skipTest(kuratest.missing("pymemcache (Debian: python3-pymemcache)"))
        s = self.kurad()
        # the address kurad listens on, never a name that may resolve elsewhere
        # (the certificate names 127.0.0.1 too)
        c = Client((s.host, s.port), tls_context=self.client_ctx(), timeout=10)
        c.set("k", b"v" * 100000)
        self.assertEqual(c.get("k"), b"v" * 100000)
        self.assertEqual(c.get_many(["k", "nope"]), {"k": b"v" * 100000})
        c.close()

    # -- replication and kuractl -----------------------------------------
    def node(self, name, args, tls=True, cert="srv"):
        d = os.path.join(tempfile.mkdtemp(prefix="kuratest-tlsrepl-", dir=self.dir), name)
        z = ["-Z", "-o", self.tls_opts(cert)] if tls else []
        s = Server(db=d + ".kh", kura_args=["-ulog", d + ".ul"] + z + list(args))
        self.addCleanup(s.stop, check=False)
        return s

    def replica_of(self, m, name, sid, args):
        return self.node(name, ["-sid", str(sid), "-mhost", "127.0.0.1", "-mport", str(m.port)]
                         + list(args), tls=False)

    def test_replication(self):
        m = self.node("m", ["-sid", "1"])
        good = self.replica_of(m, "r1", 2, ["-mtls", "-mtls-ca", self.path("ca.pem"),
                                            "-mtls-cert", self.path("client.both")])
        rogue = self.replica_of(m, "r2", 3, ["-mtls", "-mtls-ca", self.path("rogue.pem")])
        plain = self.replica_of(m, "r3", 4, [])
        with TlsConn(m.port, self.client_ctx()) as c:
            for i in range(100):
                self.assertEqual(c.request(b"set k%d 0 0 2\r\nv%d\r\n" % (i, i % 10)),
                                 b"STORED\r\n")
        with good.conn() as c:
            poll_until(lambda: c.request(b"get k99\r\n") == b"VALUE k99 0 2\r\nv9\r\nEND\r\n",
                       timeout=30, what="the -mtls replica has k99")
            self.assertEqual(stats(c, b"repl")["repl_state"], "connected")
        # the negatives: a certificate that does not verify, and no TLS at all
        with rogue.conn() as c:
            st = {}
            def failed():
                st.update(stats(c, b"repl"))
                return int(st["repl_connects"]) >= 2 and st["repl_last_error"] != ""
            poll_until(failed, timeout=30, what="the rogue replica failed twice")
            self.assertIn("does not verify", st["repl_last_error"])
            self.assertNotEqual(st["repl_state"], "connected")
            self.assertEqual(st["repl_rows_applied"], "0")
            self.assertEqual(c.request(b"get k1\r\n"), b"END\r\n")
        with plain.conn() as c:
            st = {}
            def failed():
                st.update(stats(c, b"repl"))
                return int(st["repl_connects"]) >= 2
            poll_until(failed, timeout=30, what="the plaintext replica failed twice")
            self.assertEqual(st["repl_rows_applied"], "0")
            self.assertEqual(c.request(b"get k1\r\n"), b"END\r\n")

    def test_kuractl(self):
        m = self.node("m", ["-sid", "1"])
        a = "127.0.0.1:%d" % m.port
        with TlsConn(m.port, self.client_ctx()) as c:
            self.assertEqual(c.request(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n")
        rc, out, err = kuractl("-tls-ca", self.path("ca.pem"), "-s", a, "stats")
        self.assertEqual(rc, 0, err)
        self.assertIn("curr_items", out)
        rc, out, err = kuractl("-tls", "-tls-ca", self.path("ca.pem"), "-tls-cert",
                               self.path("client.both"), "-s", a, "get", "k")
        self.assertEqual((rc, out), (0, "v"), err)
        rc, out, err = kuractl("-tls-ca", self.path("ca.pem"), "-s", a, "repl", "status")
        self.assertEqual(rc, 0, err)
        rc, out, err = kuractl("-tls-ca", self.path("rogue.pem"), "-s", a, "stats")
        self.assertEqual(rc, 3, err)
        self.assertIn("does not verify", err)
        rc, out, err = kuractl("-t", "3", "-s", a, "stats")     # plaintext: nothing back
        self.assertEqual(rc, 3, err)


if __name__ == "__main__":
    kuratest.main()
