#!/usr/bin/python3
# File descriptors, as memcached handles them: started under a descriptor
# limit too small for an explicit -c, kurad refuses with a message saying
# so (or, where it may raise the limit, raises it and serves); a default -c
# is lowered to fit; a flood of clients past -c under a small limit gets
# memcached's "ERROR Too many open connections" while the server stays idle
# and quiet (few log lines); when accept() fails with EMFILE (the limit
# lowered under the running server) it stops accepting for a while instead
# of spinning (listen_disabled_num counts each pause), and serves new
# clients again once descriptors are free.
#
# "Idle" is a state, not a share of a core: every thread of the server is
# seen asleep (state S in /proc/PID/task/*/stat) in several samples in a
# row, polled with a scaled deadline.  A thread that spins is running or
# waiting to run (R) in every sample, however loaded the machine; the
# negative check runs the same test on a process that spins.
import os, resource, socket, subprocess, sys, time, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase, Server, poll_until, kura_only, deadline

TOO_MANY = b"ERROR Too many open connections\r\n"


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def thread_states(pid):
    """The scheduler state of each thread of pid (R running or runnable,
    S sleeping, D in uninterruptible sleep, ...)."""
    out = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                out.append(f.read().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:
            pass                        # a thread that ended meanwhile
    return out


def all_asleep(pid, samples=5, interval=0.01):
    """Every thread of pid asleep in `samples` samples in a row; a thread
    that spins is runnable in each of them."""
    for _ in range(samples):
        if any(st not in ("S", "I") for st in thread_states(pid)):
            return False
        time.sleep(interval)
    return True


def assert_idle(pid, what):
    poll_until(lambda: all_asleep(pid), timeout=10, what="%s: every thread asleep" % what)


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
        assert_idle(s.proc.pid, "the server past -c")
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
        ctl = s.conn()                  # for stats: no new connection gets in below
        self.addCleanup(ctl.close)
        # Lower the running server's limit to a few descriptors above what it
        # has open: accept() then fails with EMFILE.
        soft = open_fds(s.proc.pid) + 10
        resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE, (soft, 1024))
        clients = connect_many(s.port, 80)   # the kernel queues them in the backlog
        self.assertGreater(len(clients), 20)
        # the line comes from the server's thread at its first EMFILE: polled
        poll_until(lambda: "not accepting new connections" in s.stderr(), timeout=10,
                   what="the server to log that it stopped accepting")
        # paused, not spinning: asleep between its tries (each one counted),
        # and those tries no more often than one a backoff (100 ms) apart
        t0 = time.monotonic()
        paused0 = int(kuratest.stats(ctl)["listen_disabled_num"])
        assert_idle(s.proc.pid, "the server out of descriptors")
        paused = int(kuratest.stats(ctl)["listen_disabled_num"]) - paused0
        elapsed = time.monotonic() - t0
        self.assertLessEqual(paused, elapsed / 0.1 + 2,
                             "%d pauses in %.2f s: accepting again sooner than the backoff"
                             % (paused, elapsed))
        err = s.stderr()
        self.assertLess(err.count("\n") - lines0, 50, err[-2000:])
        for c in clients:
            c.close()
        poll_until(lambda: served(s), timeout=10, what="a new client to be served")
        resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE, (1024, 1024))


class IdleCheck(unittest.TestCase):
    def test_spinning_process_is_not_idle(self):
        """The negative check of assert_idle: a process that spins is never
        seen with every thread asleep."""
        p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        hits = sum(all_asleep(p.pid, samples=5) for _ in range(20))
        self.assertEqual(hits, 0)


if __name__ == "__main__":
    kuratest.main()
