#!/usr/bin/python3
# File descriptors, as memcached handles them: started under a descriptor
# limit too small for an explicit -c, kurad refuses with a message saying
# so (or, where it may raise the limit, raises it and serves); a default -c
# is lowered to fit; a flood of clients past -c under a small limit gets
# memcached's "ERROR Too many open connections" while the server stays idle
# (CPU over a 2 s window well below a core) and quiet (few log lines); when
# accept() fails with EMFILE (the limit lowered under the running server) it
# stops accepting for a while instead of spinning, and serves new clients
# again once descriptors are free.
import os, resource, socket, subprocess, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase, Server, poll_until, kura_only, deadline

TOO_MANY = b"ERROR Too many open connections\r\n"


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def cpu_share(pid, seconds=2.0):
    """Share of one core the process used over a window of `seconds` (a
    measurement window, not a synchronisation)."""
    t0, c0 = time.monotonic(), cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def connect_many(port, n):
    """n client sockets (a refused or failed connect is simply not kept)."""
    out = []
    for _ in range(n):
        try:
            out.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
    return out


def served(server):
    """A new client gets an answer to version."""
    try:
        with server.conn(timeout=1) as c:
            return c.request(b"version\r\n").startswith(b"VERSION ")
    except (OSError, kuratest.Closed, TimeoutError):
        return False


class FdLimit(ServerTestCase):
    SERVER_OPTS = dict(threads=2)

    @kura_only
    def test_explicit_c_above_limit(self):
        s = Server(conns=5000, nofile=(128, 128), start=False)
        self.addCleanup(s.stop)
        try:
            s.start()
        except kuratest.ServerError as e:
            # Refused (the hard limit cannot be raised): the reason is given.
            self.assertIn("-c 5000 needs", str(e))
            self.assertIn("file descriptors", str(e))
            self.assertIn("lower -c", str(e))
            return
        # Or it could raise the limit (root with CAP_SYS_RESOURCE): it serves.
        with open("/proc/%d/limits" % s.proc.pid) as f:
            line = [l for l in f if l.startswith("Max open files")][0]
        self.assertGreaterEqual(int(line.split()[3]), 5000)
        self.assertTrue(served(s))

    @kura_only
    def test_default_c_lowered_to_fit(self):
        s = self.start_server(nofile=(160, 160))
        self.assertIn("maximum connections lowered", s.stderr())
        with s.conn() as c:
            conns = int(kuratest.stats(c, b"settings")["maxconns"])
        self.assertLess(conns + 64, 160)
        self.assertGreater(conns, 0)

    def test_flood_past_c(self):
        s = self.start_server(conns=40, nofile=(256, 256), threads=2)
        lines0 = s.stderr().count("\n")
        clients = connect_many(s.port, 80)
        self.assertEqual(len(clients), 80)
        share = cpu_share(s.proc.pid)
        self.assertLess(share, 0.4, "server used %.0f%% of a core" % (share * 100))
        rejected = 0
        for c in clients:
            c.settimeout(0.05)
            try:
                if c.recv(100) == TOO_MANY:
                    rejected += 1
            except OSError:
                pass
        self.assertGreater(rejected, 0)
        self.assertLess(s.stderr().count("\n") - lines0, 50)
        for c in clients:
            c.close()
        poll_until(lambda: served(s), timeout=10, what="a new client to be served")

    @kura_only
    def test_emfile_stops_accepting(self):
        s = self.start_server(conns=400, nofile=(1024, 1024), threads=2)
        lines0 = s.stderr().count("\n")
        # Lower the running server's limit to a few descriptors above what it
        # has open: accept() then fails with EMFILE.
        soft = open_fds(s.proc.pid) + 10
        resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE, (soft, 1024))
        clients = connect_many(s.port, 80)   # the kernel queues them in the backlog
        self.assertGreater(len(clients), 20)
        share = cpu_share(s.proc.pid)
        self.assertLess(share, 0.4, "server used %.0f%% of a core" % (share * 100))
        # the line comes from the server's thread at its first EMFILE: polled
        poll_until(lambda: "not accepting new connections" in s.stderr(), timeout=10,
                   what="the server to log that it stopped accepting")
        err = s.stderr()
        self.assertLess(err.count("\n") - lines0, 50, err[-2000:])
        for c in clients:
            c.close()
        poll_until(lambda: served(s), timeout=10, what="a new client to be served")
        resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE, (1024, 1024))


if __name__ == "__main__":
    kuratest.main()
