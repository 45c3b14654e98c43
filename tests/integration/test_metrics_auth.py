#!/usr/bin/python3
# kura-test: once
"""test_metrics_auth.py - HTTP Basic authentication of -metrics
(-metrics-auth FILE, else -Y's file): docs/security.md.

  Refused     /metrics without an Authorization header, with a wrong
              password, an unknown user, a malformed or non-Basic header:
              401 with WWW-Authenticate (Basic, realm "kura"), no figures,
              each counted in kura_metrics_auth_failures_total.
  Served      the right credentials: 200, promtool check metrics passes.
  -Y          without -metrics-auth, -Y's file guards /metrics; the
              negative: with neither, /metrics answers without credentials.
  Health      /health stays open (200 "ok" without credentials); while the
              server takes no writes (a replica refused by its master) it
              answers 503 to everyone, with the reason only to an
              authenticated request ("unavailable" otherwise).
  Loop        wrong passwords in a loop are each answered 401 and counted
              while another scraper with the right ones is served.
  Files       -metrics-auth missing, a directory, malformed, empty, or
              without -metrics: exit 2 and one line naming it.
"""
import base64, http.client, os, shutil, subprocess, sys, tempfile, threading, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kuratest
from kuratest import Server, poll_until, kura_only, free_port
from test_metrics import parse, value


def basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(b"%s:%s" % (user, password)).decode()}


def get(port, path, headers=None):
    """(status, headers, body) of one request on a connection of its own."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5 * kuratest.SCALE)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode()
    finally:
        c.close()


GOOD = basic(b"alice", b"secret")


@kura_only
class MetricsAuth(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kuratest-metricsauth-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.users = self.write("users", b"alice:secret\nbob:pw2\n")

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(text)
        return path

    def server(self, args):
        self.mport = free_port()
        s = Server(kura_args=["-metrics", "127.0.0.1:%d" % self.mport] + list(args))
        self.addCleanup(s.stop, check=False)
        poll_until(lambda: self.try_health(), what="the metrics endpoint")
        return s

    def try_health(self):
        try:
            return get(self.mport, "/health")
        except OSError:
            return None

    def assert_refused(self, headers):
        status, h, body = get(self.mport, "/metrics", headers)
        self.assertEqual(status, 401, headers)
        self.assertTrue(h.get("WWW-Authenticate", "").startswith('Basic realm="kura"'), h)
        self.assertNotIn("memcached_up", body)

    def test_refused_then_served(self):
        self.server(["-metrics-auth", self.users])
        bad = [None, basic(b"alice", b"wrong"), basic(b"carol", b"secret"),
               {"Authorization": "Basic !!!notbase64"}, {"Authorization": "Bearer abc"},
               basic(b"alice", b"secret ")]
        for h in bad:
            self.assert_refused(h)
        status, _, body = get(self.mport, "/metrics", GOOD)
        self.assertEqual(status, 200)
        samples, _ = parse(body)
        self.assertEqual(value(samples, "memcached_up"), 1)
        self.assertEqual(value(samples, "kura_metrics_auth_failures_total"), len(bad))
        self.assertEqual(get(self.mport, "/metrics", basic(b"bob", b"pw2"))[0], 200)
        self.assertEqual(get(self.mport, "/health")[::2], (200, "ok\n"))
        if not shutil.which("promtool"):
            self.skipTest(kuratest.missing("promtool (Debian package prometheus)"))
        p = subprocess.run(["promtool", "check", "metrics"], input=body.encode(),
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_Y_file_guards_metrics(self):
        self.server(["-Y", self.users])
        self.assert_refused(None)
        self.assertEqual(get(self.mport, "/metrics", GOOD)[0], 200)

    def test_open_without_credentials_configured(self):
        # the negative: no -Y, no -metrics-auth: served to anyone
        self.server([])
        status, h, body = get(self.mport, "/metrics")
        self.assertEqual(status, 200)
        self.assertNotIn("WWW-Authenticate", h)
        self.assertNotIn("kura_metrics_auth_failures_total", body)

    def test_health_reason_only_when_authenticated(self):
        m = Server(kura_args=["-Y", self.users, "-sid", "1", "-ulog", "%t/ulog"])
        self.addCleanup(m.stop, check=False)
        # a replica without credentials: refused by its master, so 503
        self.server(["-metrics-auth", self.users, "-sid", "2", "-ulog", "%t/ulog",
                     "-mhost", "127.0.0.1",
                     "-mport", str(m.port)])
        poll_until(lambda: get(self.mport, "/health")[0] == 503, timeout=30,
                   what="the refused replica unhealthy")
        self.assertEqual(get(self.mport, "/health")[::2], (503, "unavailable\n"))
        status, _, body = get(self.mport, "/health", GOOD)
        self.assertEqual(status, 503)
        self.assertIn("refused", body)
        status, _, body = get(self.mport, "/health", basic(b"alice", b"nope"))
        self.assertEqual((status, body), (503, "unavailable\n"))

    def test_wrong_passwords_in_a_loop(self):
        self.server(["-metrics-auth", self.users])
        n_bad, n_good = 300, 30
        done = {"bad": 0}

        def hammer():
            for i in range(n_bad):
                assert get(self.mport, "/metrics", basic(b"alice", b"w%d" % i))[0] == 401
                done["bad"] = i + 1

        t = threading.Thread(target=hammer)
        t.start()
        poll_until(lambda: done["bad"] > 5, what="the loop under way")
        for _ in range(n_good):
            self.assertEqual(get(self.mport, "/metrics", GOOD)[0], 200)
        seen = done["bad"]
        t.join()
        self.assertEqual(done["bad"], n_bad)
        print("# %d good scrapes served while %d of %d refusals had been answered"
              % (n_good, seen, n_bad), flush=True)
        samples, _ = parse(get(self.mport, "/metrics", GOOD)[2])
        self.assertEqual(value(samples, "kura_metrics_auth_failures_total"), n_bad)

    def test_bad_files(self):
        cases = {
            "missing": (["-metrics", "127.0.0.1:1"], os.path.join(self.dir, "nope")),
            "a directory": (["-metrics", "127.0.0.1:1"], self.dir),
            "malformed": (["-metrics", "127.0.0.1:1"], self.write("nocolon", b"alice\n")),
            "empty": (["-metrics", "127.0.0.1:1"], self.write("empty", b"")),
            "without -metrics": ([], self.users),
        }
        if os.geteuid() != 0:
            unreadable = self.write("unreadable", b"alice:secret\n")
            os.chmod(unreadable, 0)
            cases["unreadable"] = (["-metrics", "127.0.0.1:1"], unreadable)
        for what, (extra, path) in cases.items():
            s = Server(kura_args=extra + ["-metrics-auth", path], start=False)
            p = subprocess.run(s.argv(free_port()), capture_output=True, timeout=30,
                               cwd=s.tmpdir)
            shutil.rmtree(s.tmpdir, True)
            self.assertEqual(p.returncode, 2, (what, p.stderr))
            lines = p.stderr.decode().strip().splitlines()
            self.assertEqual(len(lines), 1, (what, lines))
            self.assertIn("-metrics-auth" if what == "without -metrics" else path, lines[0],
                          what)


if __name__ == "__main__":
    kuratest.main()
