#!/usr/bin/python3
# kura-test: once
"""test_loopback.py - where kurad listens by default: the loopback of both
families, 127.0.0.1 and ::1 (Redis' "bind 127.0.0.1 -::1"), so that a client
of "localhost" reaches it whichever address the name resolves to first (on a
stock Debian, /etc/hosts gives ::1 first).

  Default     without -host kurad says it listens on 127.0.0.1 and ::1, and
              answers on each; -host localhost and -l localhost mean the same;
              -metrics PORT without a host answers /health on both.
  Clients     pymemcache on ("localhost", port), with localhost resolving to
              ::1 first as on a stock Debian (its socket module's getaddrinfo
              reordered), stores and reads back against a default kurad; the
              negative: the old default, -host 127.0.0.1, refuses it.
  No IPv6     with socket(AF_INET6) failing (tests/shim/noipv6.c, as on a
              kernel without IPv6), a default kurad serves on 127.0.0.1, and
              says in one line that it skipped ::1.
  Forms       a malformed -host or -l ("[::1", "[::1]x", a port out of
              range) exits 2 with one line naming the option.
Not applicable where this host has no ::1 (the no-IPv6 case still runs).
"""
import http.client, os, socket, subprocess, sys, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, Conn, poll_until, kura_only, free_port


def have_ipv6_loopback():
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.bind(("::1", 0))
        s.close()
        return True
    except OSError:
        return False


class V6First:
    """A socket module whose getaddrinfo answers "localhost" as a stock
    Debian's /etc/hosts does ("::1 localhost ip6-localhost ..." beside
    "127.0.0.1 localhost"): ::1 first, whatever this machine's file says."""

    def __getattr__(self, name):
        return getattr(socket, name)

    @staticmethod
    def getaddrinfo(host, port, *args, **kw):
        if host == "localhost":
            return (socket.getaddrinfo("::1", port, *args, **kw) +
                    socket.getaddrinfo("127.0.0.1", port, *args, **kw))
        return socket.getaddrinfo(host, port, *args, **kw)


def health(host, port):
    c = http.client.HTTPConnection(host, port, timeout=5 * kuratest.SCALE)
    try:
        c.request("GET", "/health")
        return c.getresponse().status
    finally:
        c.close()


class Loopback(unittest.TestCase):

    def setUp(self):
        if kuratest.is_memcached():
            self.skipTest(kuratest.not_applicable("kurad's own default address"))

    def need_v6(self):
        if not have_ipv6_loopback():
            self.skipTest(kuratest.not_applicable("this host has no ::1"))

    def server(self, **kw):
        s = Server(**kw)
        self.addCleanup(s.stop)
        return s

    def assert_serves(self, s, host):
        with Conn(s.port, host=host) as c:
            self.assertEqual(c.request(b"version\r\n")[:8], b"VERSION ", host)

    @kura_only
    def test_default_is_both_loopbacks(self):
        self.need_v6()
        for how in ({"host": None}, {"host": "localhost"},
                    {"host": None, "kura_args": ["-l", "localhost"]}):
            s = self.server(**how)
            self.assertEqual(s.addresses(), ["127.0.0.1", "::1"], how)
            for a in s.addresses():
                self.assert_serves(s, a)
            s.stop()

    @kura_only
    def test_metrics_on_both(self):
        self.need_v6()
        mport = free_port()
        s = self.server(host=None, kura_args=["-metrics", str(mport)])
        for a in ("127.0.0.1", "::1"):
            poll_until(lambda: self.try_health(a, mport) == 200, what="/health on " + a)

    def try_health(self, host, port):
        try:
            return health(host, port)
        except OSError:
            return None

    @kura_only
    def test_pymemcache_localhost_v6_first(self):
        self.need_v6()
        try:
            from pymemcache.client.base import Client
        except ImportError:
            self.skipTest(kuratest.missing("pymemcache (Debian: python3-pymemcache)"))
        s = self.server(host=None)
        c = Client(("localhost", s.port), socket_module=V6First(), timeout=10, connect_timeout=10)
        c.set("k", b"v" * 1000)
        self.assertEqual(c.get("k"), b"v" * 1000)
        self.assertEqual(c.sock.getpeername()[0], "::1", "the client went to ::1 first")
        c.close()
        # the negative: the old default, 127.0.0.1 alone, refuses that client
        old = self.server(host="127.0.0.1")
        self.assertEqual(old.addresses(), ["127.0.0.1"])
        c = Client(("localhost", old.port), socket_module=V6First(), timeout=10, connect_timeout=10)
        with self.assertRaises(ConnectionRefusedError):
            c.set("k", b"v")
        c.close()

    @kura_only
    def test_no_ipv6_skips_v6_loopback(self):
        s = self.server(host=None, env=kuratest.preload(self, "noipv6"))
        self.assertEqual(s.addresses(), ["127.0.0.1"])
        self.assert_serves(s, "127.0.0.1")
        skipped = [l for l in s.stderr().splitlines() if "not listening on ::1" in l]
        self.assertEqual(len(skipped), 1, s.stderr())
        self.assertIn("Address family not supported", skipped[0])

    @kura_only
    def test_bad_forms_exit_2(self):
        for opt in ("-host", "-l"):
            for bad in ("[::1", "[::1]x", "[::1]:99999", "127.0.0.1:0", "[]", "a]b"):
                s = Server(host=None, kura_args=[opt, bad], start=False)
                p = subprocess.run(s.argv(free_port()), capture_output=True, timeout=30,
                                   cwd=s.tmpdir)
                self.assertEqual(p.returncode, 2, (opt, bad, p.stderr))
                lines = p.stderr.decode().strip().splitlines()
                self.assertEqual(len(lines), 1, (opt, bad, lines))
                self.assertIn("-host '", lines[0])


if __name__ == "__main__":
    kuratest.main()
